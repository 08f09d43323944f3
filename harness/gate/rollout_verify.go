package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// RolloutVerification is what the database says about a rollout phase,
// judged against what the clients got.
type RolloutVerification struct {
	// Operations counts the keys with a registry record; PaymentRows and
	// OutboxRows the run's business rows.
	Operations  int `json:"operations"`
	PaymentRows int `json:"payment_rows"`
	OutboxRows  int `json:"outbox_rows"`
	// ShadowExecutions counts the business rows beyond a key's recorded
	// operation that an attempt sent before the operation was first
	// enforced may have made: a shadow request that enforce would have
	// answered from a record (a duplicate, a different payload) executes
	// as a server without idempotency would, by design, as long as the
	// operation was never enforced. Not a failure; reported.
	ShadowExecutions int `json:"shadow_executions"`
	// DuplicateEffects counts business rows (payments and outbox
	// messages) beyond those: beyond the recorded operation's one of each,
	// more than one per attempt the key sent before the operation was
	// first enforced. Once enforced, a key with a record never executes
	// again — whatever mode a request is served in.
	DuplicateEffects int `json:"duplicate_effects"`
	// AnswersChanged counts answers that differ from the key's stored
	// answer (status, body digest or operation ID) where they must not:
	// every answer to an attempt sent once the operation was enforced,
	// and any answer naming the recorded operation. It includes answers
	// whose record is missing.
	AnswersChanged int `json:"answers_changed"`
	// ReplaysAfterEnforce counts the answers to attempts sent after the
	// operation was enforced that matched the stored answer; AnsweredKeys
	// the keys with an answer.
	ReplaysAfterEnforce int `json:"answers_after_enforce"`
	AnsweredKeys        int `json:"answered_keys"`
	// MissingEffects counts SUCCEEDED operations without their payment or
	// outbox message, and payments (recorded or plain) without their
	// payment.created message; InFlight records still RESERVED or EXECUTING after
	// the recovery pass; ConflictsAccepted different payloads that got
	// anything but 422 PAYLOAD_CONFLICT once the operation was enforced.
	MissingEffects    int      `json:"missing_effects"`
	InFlight          int      `json:"in_flight"`
	ConflictsAccepted int      `json:"conflicts_accepted"`
	Problems          []string `json:"problems,omitempty"`
}

func (v *RolloutVerification) problem(format string, args ...any) {
	if len(v.Problems) < maxProblems {
		v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
	}
}

// VerifyRollout reads the records and business rows of plan's keys from
// store and judges them against res (docs/gate.md, "The rollout phase").
// outboxMark is the outbox sequence number before the run (OutboxMark).
// ctx governs the reads.
func VerifyRollout(ctx context.Context, store registry.Store, plan Plan, res RolloutResult, outboxMark int64) (RolloutVerification, error) {
	var v RolloutVerification
	recs, err := readRecords(ctx, store, plan, payments.OperationCreate)
	if err != nil {
		return v, err
	}
	pays, outbox, err := readEffects(ctx, store, plan, outboxMark)
	if err != nil {
		return v, err
	}
	for i := range plan.Keys {
		var rk RolloutKey
		if i < len(res.Keys) {
			rk = res.Keys[i]
		}
		r := recs[i]
		switch {
		case r.err == nil:
			v.Operations++
			if r.rec.State.InFlight() {
				v.InFlight++
				v.problem("key %d: operation %s still %s after the recovery pass", i, r.rec.OperationID, r.rec.State)
			}
		case !errors.Is(r.err, registry.ErrNotFound):
			return v, fmt.Errorf("gate: reading the record of key %d: %w", i, r.err)
		}
		v.PaymentRows += len(pays[i])
		v.OutboxRows += len(outbox[i])
		v.judgeKey(i, rk, r, pays[i], outbox[i], res.Enforced)
	}
	return v, nil
}

// judgeKey judges one key: its business rows against its recorded
// operation and the attempts it sent before enforced (zero: never
// enforced) — less the one that made the record, when the record was
// created before enforced — and its answers against the stored one.
func (v *RolloutVerification) judgeKey(i int, rk RolloutKey, r keyRecord, pays, outbox []string, enforced time.Time) {
	before := len(rk.Sends) // attempts that may have executed without a record
	if !enforced.IsZero() {
		before = 0
		for _, s := range rk.Sends {
			if s.Before(enforced) {
				before++
			}
		}
	}
	if r.err == nil && before > 0 && (enforced.IsZero() || r.rec.CreatedAt.Before(enforced)) {
		// The record's own execution came from one of those attempts.
		before--
	}
	want := ""
	if r.err == nil && r.rec.State == idem.StateSucceeded {
		want = r.rec.OperationID
	}
	for _, rows := range []struct {
		what string
		ops  []string
	}{{"payment", pays}, {"outbox message", outbox}} {
		extra, found := 0, false
		for _, op := range rows.ops {
			if op == want && !found {
				found = true
				continue
			}
			extra++
		}
		if want != "" && !found {
			v.MissingEffects++
			v.problem("key %d: operation %s SUCCEEDED without its %s", i, want, rows.what)
		}
		if rows.what == "payment" {
			v.ShadowExecutions += min(extra, before)
		}
		if extra > before {
			v.DuplicateEffects += extra - before
			v.problem("key %d: %d %s rows beyond operation %s's, and only %d attempts were sent before the operation was enforced",
				i, extra, rows.what, describe(r), before)
		}
	}
	if len(outbox) < len(pays) {
		// Every execution, with a record or without (shadow's plain
		// ones), commits its payment.created message with its payment,
		// as a server without idempotency does.
		v.MissingEffects += len(pays) - len(outbox)
		v.problem("key %d: %d payments but %d payment.created messages: an execution committed without its outbox message", i, len(pays), len(outbox))
	}
	if len(rk.Answers) > 0 {
		v.AnsweredKeys++
	}
	stored := r.err == nil && r.rec.Response != nil
	var digest [32]byte
	if stored {
		digest = r.rec.Response.Digest()
	}
	for _, a := range rk.Answers {
		after := !enforced.IsZero() && !a.Sent.Before(enforced)
		if a.Conflict {
			if after && a.Code != idem.CodePayloadConflict {
				v.ConflictsAccepted++
				v.problem("key %d: a different payload sent after the operation was enforced got %d %s, want 422 %s", i, a.Status, a.Code, idem.CodePayloadConflict)
			}
			continue
		}
		names := stored && a.OperationID == r.rec.OperationID
		if !after && !names {
			continue // an execution without a record, before anything was enforced
		}
		if !stored || a.OperationID != r.rec.OperationID || a.Digest != digest {
			v.AnswersChanged++
			v.problem("key %d: answer %d (operation %q, sent in stage %d) differs from the stored answer (%s)", i, a.Status, a.OperationID, a.Stage, describe(r))
			continue
		}
		if after {
			v.ReplaysAfterEnforce++
		}
	}
}
