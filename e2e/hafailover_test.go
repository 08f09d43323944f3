package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/harness/gate"
	"github.com/idemkit/idem/internal/pgtest"
)

// Environment variables of TestHAFailover.
const (
	// haRequestsEnv sets the planned requests of each of the two gate
	// runs (default defaultHARequests).
	haRequestsEnv = "IDEM_HA_REQUESTS"
	// haReplicationEnv is "sync" (default) or "async": whether the
	// secondary takes part in pg_auto_failover's replication quorum.
	haReplicationEnv = "IDEM_HA_REPLICATION"
	// haWorkloadsEnv is the workloads of the two runs, comma-separated
	// (default "payments,transfers": the first failover under the
	// payments load, the second under the transfers load).
	haWorkloadsEnv = "IDEM_HA_WORKLOADS"
	// haFailuresEnv is the failures of the two runs, comma-separated,
	// each "node" (the whole node killed: keeper, postmaster, backends —
	// a host loss) or "postmaster" (the postmaster alone SIGKILLed, its
	// keeper left running). Default "node,node".
	haFailuresEnv = "IDEM_HA_FAILURES"
	// haReportEnv names a file to write both runs' gate reports and
	// failover figures to (JSON).
	haReportEnv = "IDEM_HA_REPORT"
)

const (
	defaultHARequests = 600
	// haWait bounds each wait for the monitor: a promotion, a rejoin.
	haWait = 2 * time.Minute
	// probeEvery is how often the refusal probe asks every instance's
	// /readyz.
	probeEvery = 50 * time.Millisecond
)

// haFigures is what one failover of TestHAFailover measures besides the
// gate's report.
type haFigures struct {
	Failure     string `json:"failure"` // "postmaster" or "node"
	Workload    string `json:"workload"`
	Replication string `json:"replication"` // "sync" or "async"
	Failed      string `json:"failed_node"`
	Promoted    string `json:"promoted_node"` // by the monitor
	// PromotedAfterMs: from the failure until the monitor reported the
	// secondary promoted (wait_primary or primary).
	PromotedAfterMs float64 `json:"promoted_after_ms"`
	// RefusalSeconds: from the first to the last /readyz that was not
	// 200 (503 STORE_UNAVAILABLE) on any instance, probed every
	// probeEvery from the failure on; RefusalProbes counts those answers.
	RefusalSeconds float64 `json:"refusal_seconds"`
	RefusalProbes  int     `json:"refusal_probes"`
	// WritingAgainAfterMs: from the failure until every instance's
	// /readyz answered 200 after the promotion (a read-write session
	// on the new primary).
	WritingAgainAfterMs float64 `json:"writing_again_after_ms"`
	// FirstNewAcceptanceMs: from the failure until the first 201 of a
	// key first sent after it (-1: none) — writes resumed. (The
	// promotion instant is when the test saw the monitor report it,
	// which can be later than the instances reached the new primary.)
	FirstNewAcceptanceMs float64 `json:"first_new_acceptance_after_failure_ms"`
	// RejoinedAfterMs: from the failure until the monitor reported the
	// failed node a secondary again (pg_rewind by its keeper).
	RejoinedAfterMs float64 `json:"rejoined_after_ms"`
	Unavailable     int64   `json:"store_unavailable"`
	Connection      int64   `json:"connection_errors"`
	State           string  `json:"state_after"` // pg_autoctl show state
	// ReplicationBefore is the failed primary's synchronous_standby_names
	// and standbys just before the failure (pgtest.HACluster.Replication).
	ReplicationBefore string `json:"replication_before"`
	// Events is the monitor's last events after the rejoin.
	Events string `json:"events"`
	// OldPrimaryWritable (postmaster): the intervals, in ms after the
	// failure, in which the failed node accepted a read-write session
	// (its keeper had restarted it as a primary), probed every
	// probeEvery until the promotion.
	OldPrimaryWritable [][2]float64 `json:"old_primary_writable_ms"`
	// ReExecutedAnswers: for each key executed twice, the instants (ms
	// after the failure) of its answers, grouped by operation ID.
	ReExecutedAnswers map[string][]float64 `json:"re_executed_answers_ms"`
}

// TestHAFailover (issue 24): TestFailover's load and gates with
// pg_auto_failover deciding the failovers. A monitor, a primary and a
// synchronous secondary (pgtest.HACluster, health checks tightened to
// seconds); two idem serve instances on the multi-host DSN take a gate
// load; midway the primary's postmaster is SIGKILLed (its keeper stays)
// and the monitor promotes the secondary by itself. The gate must pass
// (acknowledged lost 0, duplicate effects 0, replay digests consistent),
// the instances must have refused (503) and be writing again, and the
// old primary must rejoin as a secondary through the monitor. A second
// load then runs while the new primary's whole node is killed (keeper,
// postmaster, backends: a host loss); the monitor promotes the first
// node back, the same gates must pass, and the stopped node, restarted,
// rejoins. With IDEM_HA_REPLICATION=async (no replication quorum) the
// test reports what was lost and fails only if the harness broke.
// threat:ha-failover-acknowledged-loss
func TestHAFailover(t *testing.T) {
	t.Parallel()
	requests := envRequests(t, haRequestsEnv, defaultHARequests)
	replication := cmp.Or(os.Getenv(haReplicationEnv), "sync")
	if replication != "sync" && replication != "async" {
		t.Fatalf("%s=%q: want sync or async", haReplicationEnv, replication)
	}
	workloads := strings.Split(cmp.Or(os.Getenv(haWorkloadsEnv), gate.WorkloadPayments+","+gate.WorkloadTransfers), ",")
	failures := strings.Split(cmp.Or(os.Getenv(haFailuresEnv), "node,node"), ",")
	if len(workloads) != 2 || len(failures) != 2 {
		t.Fatalf("%s=%q, %s=%q: want two of each, comma-separated", haWorkloadsEnv, os.Getenv(haWorkloadsEnv), haFailuresEnv, os.Getenv(haFailuresEnv))
	}
	for _, f := range failures {
		if f != "node" && f != "postmaster" {
			t.Fatalf("%s: %q: want node or postmaster", haFailuresEnv, f)
		}
	}
	h := pgtest.NewHACluster(t, replication == "sync")
	t.Logf("pg_auto_failover formation ready:\n%s", h.StateText())

	report := map[string]any{}
	defer writeJSONReport(t, haReportEnv, report)
	phases := []struct{ failed, promoted, db string }{
		{pgtest.NodeA, pgtest.NodeB, "ha_first"},
		{pgtest.NodeB, pgtest.NodeA, "ha_back"},
	}
	for i, p := range phases {
		fig := haFigures{Failure: failures[i], Workload: workloads[i], Replication: replication,
			Failed: p.failed, Promoted: p.promoted, FirstNewAcceptanceMs: -1}
		rep, rejoined := haRun(t, h, &fig, p.db, requests)
		report[p.db] = map[string]any{"gate": rep, "failover": fig}
		if !rejoined {
			return // the failover back needs a secondary
		}
	}
}

// haRun runs one gate load on a new database db while fig.Failed fails
// as fig.Failure says, checks the gates and the failover, and waits
// for the failed node to rejoin as a secondary (rejoined).
func haRun(t *testing.T, h *pgtest.HACluster, fig *haFigures, db string, requests int) (_ *gate.Report, rejoined bool) {
	dsn, err := h.DSN(db)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // guards fig and the instants while the hook runs
	var failed, promoted time.Time
	hook := func(ctx context.Context, m gate.Midpoint) error {
		probe := startRefusalProbe(ctx, m.URLs)
		defer probe.stop()
		repl, err := h.Replication(fig.Failed)
		if err != nil {
			return err
		}
		at := time.Now()
		var old *writableProbe
		if fig.Failure == "node" {
			at, err = h.StopNode(fig.Failed)
		} else {
			_, err = h.KillPostmaster(fig.Failed)
			old = startWritableProbe(ctx, h.NodeDSN(fig.Failed), at)
			defer old.stop()
		}
		if err != nil {
			return err
		}
		m.Say("%s: %s; the monitor decides", fig.Failed, fig.Failure)
		if err := h.WaitPromoted(haWait, fig.Promoted); err != nil {
			return err
		}
		p := time.Now()
		m.Say("the monitor promoted %s %v after the failure", fig.Promoted, p.Sub(at).Round(time.Millisecond))
		if err := awaitReadyz(ctx, m.URLs, http.StatusOK, "", readyWait); err != nil {
			return err
		}
		ready := time.Now()
		probe.stop()
		mu.Lock()
		defer mu.Unlock()
		if old != nil {
			old.stop()
			fig.OldPrimaryWritable = old.intervals()
		}
		failed, promoted = at, p
		fig.ReplicationBefore = repl
		fig.PromotedAfterMs, fig.WritingAgainAfterMs = ms(p.Sub(at)), ms(ready.Sub(at))
		fig.RefusalSeconds, fig.RefusalProbes = probe.window().Seconds(), probe.refusals()
		m.Say("every instance ready again %v after the failure", ready.Sub(at).Round(time.Millisecond))
		return nil
	}
	rep, err := gate.Run(t.Context(), failoverGate(t, dsn, fig.Workload, requests, hook))
	if err != nil {
		t.Fatalf("the gate could not run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	fig.Unavailable, fig.Connection = rep.Resends["STORE_UNAVAILABLE"], rep.Resends["connection"]
	if promoted.IsZero() {
		t.Fatalf("%s: the monitor did not promote %s (problems: %q)\n%s", fig.Failure, fig.Promoted, rep.Problems, h.StateText())
	}
	fig.FirstNewAcceptanceMs = firstNewAcceptance(rep.Load, failed)
	fig.ReExecutedAnswers = reExecutedAnswers(rep.Load, failed)

	// The failed node rejoins through the monitor: a killed postmaster's
	// keeper is still there; a stopped node's keeper is started again.
	if fig.Failure == "node" {
		if err := h.RestartNode(fig.Failed); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.WaitState(haWait, fig.Promoted, "primary", fig.Failed, "secondary"); err != nil {
		t.Errorf("%s did not rejoin as a secondary of %s: %v", fig.Failed, fig.Promoted, err)
	} else {
		fig.RejoinedAfterMs, rejoined = ms(time.Since(failed)), true
	}
	fig.State, fig.Events = h.StateText(), h.Events(60)
	t.Log(haFiguresText(rep, *fig))

	if rep.Crashes != 0 || rep.InstanceProblems != 0 {
		t.Errorf("instances: %d restarts, %d problems; want none (problems: %q)", rep.Crashes, rep.InstanceProblems, rep.Problems)
	}
	if fig.Replication == "async" {
		return rep, rejoined // the losses are reported, not judged
	}
	if !rep.Passed || rep.AcknowledgedLost != 0 || rep.DuplicateEffects != 0 || rep.ReplayDigestMismatches != 0 {
		var text strings.Builder
		rep.WriteText(&text)
		t.Errorf("%s: the gate failed after pg_auto_failover promoted a synchronous secondary:\n%s", fig.Failure, text.String())
	}
	if fig.Unavailable+fig.Connection+int64(fig.RefusalProbes) == 0 {
		t.Errorf("%s: no 503 and no connection error: the failover was not under load (re-sends %v)", fig.Failure, rep.Resends)
	}
	if fig.FirstNewAcceptanceMs < 0 {
		t.Errorf("%s: no key first sent after the failure was accepted", fig.Failure)
	}
	return rep, rejoined
}

// haFiguresText is one failover's readable block of figures.
func haFiguresText(rep *gate.Report, f haFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pg_auto_failover, %s replication, %s of %s lost, %s workload, gate passed: %v (run %s, seed %d)\n",
		f.Replication, f.Failure, f.Failed, f.Workload, rep.Passed, rep.Run, rep.Seed)
	fmt.Fprintf(&b, "  load       %d keys × %d retries = %d planned, %d requests sent in %.1f s, %d keys re-sent after the load\n",
		rep.Keys, rep.Retries, rep.Planned, rep.Requests, rep.LoadSeconds, rep.ResentKeys)
	fmt.Fprintf(&b, "  switch     %s promoted by the monitor %.0f ms after the failure; /readyz refused for %.2f s (%d probes); every instance writing again %.0f ms after the failure; first new key accepted %.0f ms after the failure; %s a secondary again %.0f ms after the failure\n",
		f.Promoted, f.PromotedAfterMs, f.RefusalSeconds, f.RefusalProbes, f.WritingAgainAfterMs, f.FirstNewAcceptanceMs, f.Failed, f.RejoinedAfterMs)
	fmt.Fprintf(&b, "  outage     %d × 503 STORE_UNAVAILABLE, %d connection errors; all re-sends %v\n", f.Unavailable, f.Connection, rep.Resends)
	fmt.Fprintf(&b, "  losses     %d acknowledged operations lost, %d keys executed again, %d duplicate effects, %d digest mismatches, %d false conflicts; instances restarted %d, instance problems %d\n",
		rep.AcknowledgedLost, rep.ReExecuted, rep.DuplicateEffects, rep.ReplayDigestMismatches, rep.FalseConflicts, rep.Crashes, rep.InstanceProblems)
	if f.Failure == "postmaster" {
		fmt.Fprintf(&b, "  old primary accepted read-write sessions (restarted by its keeper) at %v ms after the failure\n", f.OldPrimaryWritable)
	}
	if len(f.ReExecutedAnswers) > 0 {
		fmt.Fprintf(&b, "  keys executed twice, their answers' instants (ms after the failure) by operation: %v\n", f.ReExecutedAnswers)
	}
	fmt.Fprintf(&b, "  before     the primary's synchronous_standby_names / standbys: %s\n", f.ReplicationBefore)
	b.WriteString(f.State)
	if rep.AcknowledgedLost > 0 {
		b.WriteString("\n  the monitor's events:\n" + f.Events)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(&b, "\n  problem: %s", p)
	}
	return b.String()
}
