package gate

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

var tamper = sqlfile.MustLoad(os.DirFS("testdata"), "tamper.sql")

// smallConfig is a load small enough for a test under -race: 24 keys × 4
// retries, a generous latency budget (the reservation gate is tested
// with histograms of known content, not with this machine's speed).
func smallConfig() Config {
	return Config{DSN: "sqlite:unused", Requests: 96, Retries: 4, Concurrency: 8,
		ConflictRate: 0.25, RefusalRate: 0.15, LatencyBudget: time.Hour, Seed: 7}
}

// runSmall drives smallConfig's load through a fresh bundle and returns
// everything Verify and NewReport need.
func runSmall(t *testing.T, kind string) (*bundle, Config, Plan, LoadResult, int64) {
	t.Helper()
	cfg := smallConfig().withDefaults()
	plan := NewPlan(cfg.keys(), cfg.Retries, cfg.Principals, cfg.ConflictRate, cfg.RefusalRate, cfg.Seed)
	b := newBundle(t, kind, 2, plan.Tokens())
	mark, err := OutboxMark(context.Background(), b.store)
	if err != nil {
		t.Fatal(err)
	}
	res := Load(context.Background(), cfg, plan, b.targets, nil)
	return b, cfg, plan, res, mark
}

func verify(t *testing.T, b *bundle, cfg Config, plan Plan, res LoadResult, mark int64) *Report {
	t.Helper()
	v, err := Verify(context.Background(), b.store, plan, res, mark, cfg.RecoverySLO)
	if err != nil {
		t.Fatal(err)
	}
	return NewReport(cfg, plan, res, v, b.scrape(t))
}

func TestVerify(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b, cfg, plan, res, mark := runSmall(t, kind)
			r := verify(t, b, cfg, plan, res, mark)
			if !r.Passed {
				t.Fatalf("clean run failed: %+v\nproblems: %q", r.Gates, r.Problems)
			}
			checkCleanCounts(t, r, plan)

			// A clean verification still fails when an instance had a
			// problem (Run counts them: a crash nobody asked for, a
			// histogram missing from the p99).
			lost := *r
			lost.Problems = nil
			lost.InstanceProblems = 1
			lost.problem("gate: instance 1 had exited on its own")
			lost.decide()
			wantFailed(t, &lost, "instance_problems")

			// Each change below is one a broken idem could make; the
			// verification must catch it and the report must fail.
			succeeded := firstKey(t, b, plan, res, func(k Key) bool { return !k.Refused })
			op := res.Keys[succeeded].Answers[0].OperationID

			tamperExec(t, b, "second_payment", op)
			r = verify(t, b, cfg, plan, res, mark)
			wantFailed(t, r, "duplicate_effects")
			if r.DuplicateEffects != 1 || r.Verification.DuplicatePayments != 1 {
				t.Errorf("duplicate payment: duplicate_effects %d, payments %d; want 1, 1", r.DuplicateEffects, r.Verification.DuplicatePayments)
			}

			tamperExec(t, b, "delete_payment", op+"_dup")
			other := firstKey(t, b, plan, res, func(k Key) bool { return k.Index != succeeded })
			corruptBody(t, b, res.Keys[other].Answers[0].OperationID)
			r = verify(t, b, cfg, plan, res, mark)
			wantFailed(t, r, "replay_digest_consistency")
			if r.Verification.CorruptSnapshots != 1 || r.ReplayDigestMismatches != len(res.Keys[other].Answers) {
				t.Errorf("corrupt body: corrupt %d, mismatches %d; want 1, %d", r.Verification.CorruptSnapshots, r.ReplayDigestMismatches, len(res.Keys[other].Answers))
			}
			want := float64(len(plan.Keys)-1) / float64(len(plan.Keys))
			if r.ReplayDigestConsistency != want {
				t.Errorf("consistency %v, want %v", r.ReplayDigestConsistency, want)
			}

			tamperExec(t, b, "delete_payment", op)
			r = verify(t, b, cfg, plan, res, mark)
			wantFailed(t, r, "replay_digest_consistency", "contract_violations")
			if r.Verification.MissingEffects != 1 || r.DuplicateEffects != 0 {
				t.Errorf("deleted payment: missing %d, duplicates %d; want 1, 0", r.Verification.MissingEffects, r.DuplicateEffects)
			}
		})
	}
}

// TestVerifyClientAnswers changes what a client saw instead of the
// database: an answer with another digest, a false conflict and an
// unanswered request each fail the run.
func TestVerifyClientAnswers(t *testing.T) {
	b, cfg, plan, res, mark := runSmall(t, "sqlite")
	i := firstKey(t, b, plan, res, func(Key) bool { return true })
	saved := res.Keys[i]
	ans := append([]Answer(nil), saved.Answers...)
	ans[len(ans)-1].Digest[0] ^= 1
	res.Keys[i].Answers = ans
	r := verify(t, b, cfg, plan, res, mark)
	wantFailed(t, r, "replay_digest_consistency")
	if r.ReplayDigestMismatches != 1 {
		t.Errorf("mismatches %d, want 1", r.ReplayDigestMismatches)
	}

	res.Keys[i] = saved
	res.Keys[i].FalseConflicts = 1
	wantFailed(t, verify(t, b, cfg, plan, res, mark), "false_conflicts")

	res.Keys[i] = saved
	res.Keys[i].Unanswered = 1
	wantFailed(t, verify(t, b, cfg, plan, res, mark), "contract_violations")

	res.Keys[i] = KeyResult{} // never sent: an interrupted load
	r = verify(t, b, cfg, plan, res, mark)
	if r.UnansweredRequests != plan.Retries || r.Passed {
		t.Errorf("a key never sent: unanswered %d, passed %v; want %d, false", r.UnansweredRequests, r.Passed, plan.Retries)
	}
}

// checkCleanCounts checks the counts of a clean run against the plan.
func checkCleanCounts(t *testing.T, r *Report, plan Plan) {
	t.Helper()
	var refused, conflicts int
	for _, k := range plan.Keys {
		if k.Refused {
			refused++
		}
		if k.Conflict {
			conflicts++
		}
	}
	v := r.Verification
	ok := r.Keys == len(plan.Keys) && r.Refused == refused && r.Succeeded == len(plan.Keys)-refused &&
		v.PaymentRows == r.Succeeded && v.OutboxRows == r.Succeeded && v.Operations == len(plan.Keys) &&
		v.TerminalAnswers == len(plan.Keys)*plan.Retries && r.Replays == v.TerminalAnswers-len(plan.Keys) &&
		r.ConflictsSent == conflicts && r.ConflictsRefused == conflicts &&
		r.Requests >= int64(v.TerminalAnswers+conflicts) && r.Reservations >= uint64(v.TerminalAnswers) &&
		r.ClientHistogram.Count() == uint64(r.Requests) && r.ClientP99Ms > 0
	if !ok || refused == 0 || conflicts == 0 {
		t.Errorf("counts of a clean run (plan: %d keys, %d refused, %d conflicts): %+v", len(plan.Keys), refused, conflicts, r)
	}
}

func firstKey(t *testing.T, b *bundle, plan Plan, res LoadResult, ok func(Key) bool) int {
	t.Helper()
	for i, k := range plan.Keys {
		if ok(k) && len(res.Keys[i].Answers) > 0 {
			return i
		}
	}
	t.Fatal("no such key answered")
	return 0
}

// wantFailed checks that r failed exactly the named gates.
func wantFailed(t *testing.T, r *Report, gates ...string) {
	t.Helper()
	if r.Passed {
		t.Errorf("report passed; want gates %v to fail", gates)
	}
	for _, g := range r.Gates {
		if want := slices.Contains(gates, g.Name); g.Passed == want {
			t.Errorf("gate %s passed: %v (value %v); want %v", g.Name, g.Passed, g.Value, !want)
		}
	}
	if len(r.Problems) == 0 {
		t.Error("no problem described")
	}
}

func tamperExec(t *testing.T, b *bundle, query string, args ...any) {
	t.Helper()
	err := b.store.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, tamper.Get(query), args...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// corruptBody changes the stored response body of an operation behind
// the registry's back.
func corruptBody(t *testing.T, b *bundle, op string) {
	t.Helper()
	tamperRecord(t, b, "corrupt_body", []byte(`{"id":"forged"}`), op)
}

// tamperRecord runs a tamper query that changes one operation record,
// with the registry's guard triggers out of the way.
func tamperRecord(t *testing.T, b *bundle, query string, args ...any) {
	t.Helper()
	err := b.store.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		pre := []string{"pg_no_triggers", "pg_drop_checks"}
		if b.kind == "sqlite" {
			pre = []string{"sqlite_drop_transition", "sqlite_drop_retire", "sqlite_drop_terminal", "sqlite_drop_tombstone", "sqlite_drop_identity",
				"sqlite_drop_settled_body", "sqlite_ignore_checks"}
			defer tx.Exec(ctx, tamper.Get("sqlite_heed_checks")) // the connection goes back to the pool
		}
		for _, q := range pre {
			if _, err := tx.Exec(ctx, tamper.Get(q)); err != nil {
				return err
			}
		}
		n, err := tx.Exec(ctx, tamper.Get(query), args...)
		if err == nil && n != 1 {
			t.Errorf("%s changed %d rows", query, n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
