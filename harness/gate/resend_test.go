package gate

import (
	"context"
	"testing"
)

// TestResend: with Config.Resend every answered key is sent once more
// after the load and replays its stored response, and the run passes.
// Then the client's answers are changed the ways a failover to a standby
// that lost commits changes them: an answer naming another operation
// than the stored one (lost and executed again), every answer naming
// another (lost only), and answers for keys the database has no record
// of (lost).
func TestResend(t *testing.T) {
	cfg := smallConfig()
	cfg.Resend = true
	cfg = cfg.withDefaults()
	plan := NewPlan(cfg.keys(), cfg.Retries, cfg.Principals, cfg.ConflictRate, cfg.RefusalRate, cfg.Seed)
	b := newBundle(t, "sqlite", 2, plan.Tokens())
	mark, err := OutboxMark(context.Background(), b.store)
	if err != nil {
		t.Fatal(err)
	}
	res := Load(context.Background(), cfg, plan, b.targets, nil)
	r := verify(t, b, cfg, plan, res, mark)
	if !r.Passed || r.ResentKeys != len(plan.Keys) || r.Verification.TerminalAnswers != len(plan.Keys)*(plan.Retries+1) {
		t.Fatalf("clean run with re-send: passed %v, %d keys re-sent, %d terminal answers; want true, %d, %d\nproblems: %q",
			r.Passed, r.ResentKeys, r.Verification.TerminalAnswers, len(plan.Keys), len(plan.Keys)*(plan.Retries+1), r.Problems)
	}

	again, lost := res.Keys[0], res.Keys[1]
	res.Keys[0].Answers = append([]Answer(nil), again.Answers...)
	last := &res.Keys[0].Answers[len(again.Answers)-1]
	last.OperationID, last.Digest[0] = "op_executed_again", last.Digest[0]^1
	res.Keys[1].Answers = append([]Answer(nil), lost.Answers...)
	for j := range res.Keys[1].Answers {
		res.Keys[1].Answers[j].OperationID = "op_lost"
	}
	r = verify(t, b, cfg, plan, res, mark)
	wantFailed(t, r, "replay_digest_consistency", "acknowledged_lost", "re_executed")
	if r.AcknowledgedLost != 2 || r.ReExecuted != 1 || r.Verification.AcknowledgedLost != 2 {
		t.Errorf("acknowledged lost %d, re-executed %d; want 2, 1", r.AcknowledgedLost, r.ReExecuted)
	}

	res.Keys[0], res.Keys[1] = again, lost
	other := NewPlan(cfg.keys(), cfg.Retries, cfg.Principals, cfg.ConflictRate, cfg.RefusalRate, cfg.Seed) // new keys: no records
	v, err := Verify(context.Background(), b.store, other, res, mark, cfg.RecoverySLO)
	if err != nil {
		t.Fatal(err)
	}
	if v.AcknowledgedLost != len(plan.Keys) || v.ReExecuted != 0 {
		t.Errorf("answers for keys without records: acknowledged lost %d, re-executed %d; want %d, 0", v.AcknowledgedLost, v.ReExecuted, len(plan.Keys))
	}
}
