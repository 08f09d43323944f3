package gate

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// TestJudgeRolloutKey pins the rollout phase's definitions on one key at
// a time: business rows beyond the recorded operation's are allowed only
// up to the attempts sent before the operation was first enforced (a
// shadow re-execution, by design) less the one that made the record,
// never after; every answer to an
// attempt sent after enforce, and every answer naming the recorded
// operation, must be the stored answer; a different payload sent after
// enforce must be refused.
// Proves threat:rollout-switch-under-load (the gate's judgement).
func TestJudgeRolloutKey(t *testing.T) {
	enforced := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	beforeE, afterE := enforced.Add(-time.Second), enforced.Add(time.Second)
	resp, err := idem.NewResponse(http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, []byte(`{"id":"pay_a"}`), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rec := keyRecord{rec: registry.Record{OperationID: "op_a", State: idem.StateSucceeded, Response: &resp, CreatedAt: beforeE}}
	stored := Answer{Status: http.StatusCreated, Digest: resp.Digest(), OperationID: "op_a"}
	plainAnswer := Answer{Status: http.StatusCreated, Digest: [32]byte{1}, OperationID: "op_x"}
	at := func(a Answer, sent time.Time) RolloutAnswer { return RolloutAnswer{Answer: a, Sent: sent} }

	cases := []struct {
		name        string
		key         RolloutKey
		pays        []string
		enforced    time.Time
		dup, shadow int
		changed     int
		accepted    int
	}{
		{name: "recorded once, replayed after enforce",
			key:  RolloutKey{Sends: []time.Time{beforeE, afterE}, Answers: []RolloutAnswer{at(stored, beforeE), at(stored, afterE)}},
			pays: []string{"op_a"}, enforced: enforced},
		{name: "a shadow re-execution before enforce is by design",
			key:  RolloutKey{Sends: []time.Time{beforeE, beforeE, afterE}, Answers: []RolloutAnswer{at(stored, beforeE), at(plainAnswer, beforeE), at(stored, afterE)}},
			pays: []string{"op_a", "op_x"}, enforced: enforced, shadow: 1},
		{name: "a re-execution with every attempt after enforce is a duplicate",
			key:  RolloutKey{Sends: []time.Time{afterE, afterE}, Answers: []RolloutAnswer{at(stored, afterE), at(plainAnswer, afterE)}},
			pays: []string{"op_a", "op_x"}, enforced: enforced, dup: 1, changed: 1},
		{name: "more re-executions than attempts before enforce",
			key:  RolloutKey{Sends: []time.Time{beforeE, afterE}, Answers: []RolloutAnswer{at(stored, beforeE), at(stored, afterE)}},
			pays: []string{"op_a", "op_x", "op_y"}, enforced: enforced, dup: 2},
		{name: "never enforced: every attempt may have executed",
			key:  RolloutKey{Sends: []time.Time{afterE, afterE, afterE}, Answers: []RolloutAnswer{at(stored, afterE), at(plainAnswer, afterE)}},
			pays: []string{"op_a", "op_x", "op_y"}, shadow: 2},
		{name: "a stored answer changed before enforce",
			key:  RolloutKey{Sends: []time.Time{beforeE}, Answers: []RolloutAnswer{at(Answer{Status: http.StatusCreated, OperationID: "op_a"}, beforeE)}},
			pays: []string{"op_a"}, enforced: enforced, changed: 1},
		{name: "a different payload accepted after enforce",
			key: RolloutKey{Sends: []time.Time{beforeE, afterE},
				Answers: []RolloutAnswer{at(stored, beforeE), {Answer: plainAnswer, Sent: afterE, Conflict: true}}},
			pays: []string{"op_a", "op_x"}, enforced: enforced, dup: 1, accepted: 1},
		{name: "a different payload executed in shadow before enforce",
			key: RolloutKey{Sends: []time.Time{beforeE, beforeE},
				Answers: []RolloutAnswer{at(stored, beforeE), {Answer: plainAnswer, Sent: beforeE, Conflict: true}}},
			pays: []string{"op_a", "op_x"}, enforced: enforced, shadow: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v RolloutVerification
			v.judgeKey(0, c.key, rec, c.pays, c.pays, c.enforced) // outbox as payments
			if v.DuplicateEffects != 2*c.dup || v.ShadowExecutions != c.shadow || v.AnswersChanged != c.changed || v.ConflictsAccepted != c.accepted {
				t.Errorf("duplicates %d (payments and outbox), shadow executions %d, answers changed %d, conflicts accepted %d; want %d, %d, %d, %d\n%v",
					v.DuplicateEffects, v.ShadowExecutions, v.AnswersChanged, v.ConflictsAccepted, 2*c.dup, c.shadow, c.changed, c.accepted, v.Problems)
			}
			if v.MissingEffects != 0 {
				t.Errorf("missing effects %d: %v", v.MissingEffects, v.Problems)
			}
		})
	}

	// A shadow execution that committed its payment without its
	// payment.created message is a missing effect.
	var v RolloutVerification
	v.judgeKey(0, RolloutKey{Sends: []time.Time{beforeE, beforeE}, Answers: []RolloutAnswer{at(stored, beforeE), at(plainAnswer, beforeE)}},
		rec, []string{"op_a", "op_x"}, []string{"op_a"}, enforced)
	if v.MissingEffects != 1 || v.DuplicateEffects != 0 {
		t.Errorf("a plain payment without its message: missing effects %d, duplicates %d; want 1, 0", v.MissingEffects, v.DuplicateEffects)
	}
}
