package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// rolloutJSON is the part of "idem gate --rollout --json" the test reads.
type rolloutJSON struct {
	Passed  bool `json:"passed"`
	Crashes int  `json:"crashes"`
	Rollout struct {
		Changes string `json:"changes"`
		Stages  []struct {
			Mode            string `json:"mode"`
			Percent         int    `json:"percent"`
			TenantsEnforced int    `json:"tenants_enforced"`
			Crash           bool   `json:"crash"`
		} `json:"stages"`
		EnforcedAt   string `json:"enforced_at"`
		Verification struct {
			DuplicateEffects    int `json:"duplicate_effects"`
			AnswersChanged      int `json:"answers_changed"`
			AnswersAfterEnforce int `json:"answers_after_enforce"`
			ShadowExecutions    int `json:"shadow_executions"`
		} `json:"verification"`
		Verdicts []struct {
			Verdict   string `json:"verdict"`
			Predicted int64  `json:"shadow_predicted"`
			Answered  int64  `json:"enforce_answered"`
		} `json:"verdicts"`
	} `json:"rollout"`
	Problems []string `json:"problems"`
}

// TestGateRollout runs the rollout phase (idem gate --rollout) small on
// PostgreSQL with two real "idem serve" instances: it passes, every stage
// of the ramp ran (with "idem rollout" as the operator's command) and
// the 50 % stage killed an instance, keys retried after enforce replayed
// their stored answer with no duplicate effect, and the registry holds
// shadow's predicted replays beside enforce's answered ones.
// Proves threat:rollout-switch-under-load and threat:shadow-answer-lost.
func TestGateRollout(t *testing.T) {
	bin := buildIdem(t)
	dsn := pgtest.DSN(t)
	html := filepath.Join(t.TempDir(), "rollout.html")
	code, stdout, stderr := runCmd(t, "", "gate", "--json", "--rollout", "--bin", bin, "--db", dsn, "--instances", "2",
		"--requests", "500", "--retries", "5", "--seed", "7", "--html", html)
	var r rolloutJSON
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("exit %d, stdout %q: %v\nstderr:\n%s", code, stdout, err, stderr)
	}
	ro := r.Rollout
	if code != exitOK || !r.Passed || r.Crashes != 1 || len(ro.Stages) != 5 || ro.Changes != "idem rollout" {
		t.Fatalf("exit %d, report %+v\nstderr:\n%s", code, r, stderr)
	}
	if !ro.Stages[2].Crash || ro.Stages[4].Percent != 100 || ro.Stages[3].Mode != "shadow" || ro.EnforcedAt == "" {
		t.Errorf("stages %+v, enforced at %q; want the crash at 50 %%, shadow again, then 100 %%, and EnforcedAt set", ro.Stages, ro.EnforcedAt)
	}
	v := ro.Verification
	if v.DuplicateEffects != 0 || v.AnswersChanged != 0 || v.AnswersAfterEnforce == 0 {
		t.Errorf("verification %+v; want no duplicate, no changed answer, and answers after enforce", v)
	}
	var predicted, answered int64
	for _, c := range ro.Verdicts {
		if c.Verdict == "replay" {
			predicted, answered = c.Predicted, c.Answered
		}
	}
	if predicted == 0 || answered == 0 {
		t.Errorf("verdicts %+v; want replays predicted in shadow and answered under enforce", ro.Verdicts)
	}
	if !strings.Contains(stderr, "killing instance 0 with SIGKILL") || !strings.Contains(stderr, "stage 4 in effect on every instance") {
		t.Errorf("progress lacks the crash or the last stage:\n%s", stderr)
	}
	b, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"PASSED", "Rollout phase", "Shadow predictions against enforce outcomes", "answers_changed"} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
}

func TestGateRolloutUsage(t *testing.T) {
	if code, _, stderr := runCmd(t, "", "gate", "--db", "sqlite:x.db", "--rollout", "--instances", "1", "--bin", "/nonexistent"); code != exitRefused || !strings.Contains(stderr, "at least 2 instances") {
		t.Errorf("rollout with one instance: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "gate", "--db", "sqlite:x.db", "--rollout", "--workload", "transfers", "--bin", "/nonexistent"); code != exitRefused || !strings.Contains(stderr, "payments workload") {
		t.Errorf("rollout with transfers: exit %d, stderr %q", code, stderr)
	}
}
