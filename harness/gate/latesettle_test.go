package gate

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/registry"
)

// TestLateSettlementRun is the gate's late-settlement phase on SQLite
// against real "idem serve" and "idem provider" processes: the instances
// keep records for a retention of 3 s and prune every 100 ms, the provider
// refuses every new transfer for 7 s as the load starts, so the keys then
// in flight stay UNKNOWN for longer than the retention; once the outage is
// over and they settled (one declined, the others executed), each is
// retried after a prune pass that began after its settlement and must
// replay its settled answer — never 409 KEY_RETIRED, never a second
// execution. threat:late-settlement-lost
func TestLateSettlementRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "idem")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/idem").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var progress strings.Builder
	cfg := Config{
		DSN: "sqlite:" + filepath.Join(t.TempDir(), "gate.db"), Bin: bin, Workload: WorkloadTransfers,
		Instances: 1, Requests: 160, Retries: 4, Concurrency: 16, Lease: 2 * time.Second,
		RecoverInterval: 200 * time.Millisecond, LatencyBudget: time.Minute, FaultInterval: 200 * time.Millisecond,
		FaultKeys: 3, Retention: 3 * time.Second, Outage: 7 * time.Second, Seed: 42, Progress: &progress,
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var text, page strings.Builder
	r.WriteText(&text)
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	l := r.Late
	if !r.Passed || l == nil || l.Settled < 2 || l.Replayed != l.Settled || r.LateSettledReplayed != 1 ||
		r.DuplicateEffects != 0 || r.ReExecuted != 0 || r.OutageSeconds <= cfg.Retention.Seconds() ||
		!slices.ContainsFunc(r.Gates, func(g Gate) bool { return g.Name == "late_settled_replayed" && g.Passed }) {
		t.Fatalf("%s\nprogress:\n%s", text.String(), progress.String())
	}
	// One of the late keys settled as the provider's decline, the others
	// executed: both kinds replayed.
	declined := 0
	for _, kr := range r.Load.Keys {
		if kr.Late != nil && !kr.Answers[0].succeeded() {
			declined++
		}
	}
	if declined != 1 {
		t.Errorf("%d late-settled keys declined, want 1\n%s", declined, text.String())
	}
	want := fmt.Sprintf("%d late-settled operations, %d replayed", l.Settled, l.Replayed)
	if !strings.Contains(text.String(), want) || !strings.Contains(page.String(), "late-settled operations replayed after a prune pass") {
		t.Errorf("the reports lack the late-settlement counts (%q):\n%s", want, text.String())
	}
	t.Logf("%s", text.String())
}

// TestVerifyTransfersRetired: records retired (tombstones, the response
// gone) before the check have their answers held to their operation IDs;
// a run without a retention counts each as a replay digest mismatch, and
// an answer naming another operation is an acknowledged operation lost.
func TestVerifyTransfersRetired(t *testing.T) {
	t.Parallel()
	cfg := transferConfig()
	plan := NewPlan(cfg.keys(), cfg.Retries, cfg.Principals, cfg.ConflictRate, cfg.RefusalRate, cfg.Seed)
	plan.PayeePerKey()
	prov := httptest.NewServer(provider.New().Handler())
	t.Cleanup(prov.Close)
	b := newBundle(t, "sqlite", 2, plan.Tokens(), func(c *payments.Config) {
		c.Provider, c.Retention = prov.URL, 200*time.Millisecond
	})
	b.op = payments.OperationTransfer
	res := Load(context.Background(), cfg, plan, b.targets, nil)
	list, err := newProviderClient(prov.URL).transfers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Prune until every key's record retired (each settled, so each
	// expires 200 ms after its settlement).
	retired, deadline := 0, time.Now().Add(time.Minute)
	for retired < len(plan.Keys) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records retired within a minute", retired, len(plan.Keys))
		}
		r, err := registry.PruneAll(context.Background(), b.store, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		retired += r.Retired
		sleep(context.Background(), 50*time.Millisecond)
	}
	retCfg := cfg
	retCfg.Retention = time.Second
	r := verifyTransfers(t, b, retCfg, plan, res, list)
	v := r.Verification
	if v.RetiredKeys != v.AnsweredKeys || v.AnsweredKeys != len(plan.Keys) || v.ConsistentKeys != v.AnsweredKeys ||
		v.DigestMismatches != 0 || r.ReplayDigestConsistency != 1 || r.AcknowledgedLost != 0 {
		t.Errorf("every record retired, with a retention: %+v\nproblems: %q", v, r.Problems)
	}
	wantFailed(t, r, "late_settled_replayed") // no late-settled key: the phase proved nothing

	r = verifyTransfers(t, b, cfg, plan, res, list)
	wantFailed(t, r, "replay_digest_consistency")
	if r.ReplayDigestMismatches != len(plan.Keys) {
		t.Errorf("without a retention: %d digest mismatches, want %d", r.ReplayDigestMismatches, len(plan.Keys))
	}

	changed := cloneResult(res)
	kr := &changed.Keys[0]
	kr.Answers = slices.Clone(kr.Answers)
	kr.Answers[0].OperationID = "op_elsewhere"
	r = verifyTransfers(t, b, retCfg, plan, changed, list)
	wantFailed(t, r, "replay_digest_consistency", "acknowledged_lost", "re_executed", "late_settled_replayed")
	if r.AcknowledgedLost != 1 {
		t.Errorf("acknowledged_lost %d, want 1", r.AcknowledgedLost)
	}
}
