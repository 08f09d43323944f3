package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/harness/gate"
	"github.com/idemkit/idem/internal/pgtest"
)

// Environment variables of TestFailover.
const (
	// failoverRequestsEnv sets the planned requests (default
	// defaultFailoverRequests; the documented run uses 6000).
	failoverRequestsEnv = "IDEM_FAILOVER_REQUESTS"
	// failoverStandbyEnv is "sync" (default) or "async": the standby's
	// replication mode.
	failoverStandbyEnv = "IDEM_FAILOVER_STANDBY"
	// failoverTwoPhaseEnv, set to "1", runs idem serve with --two-phase.
	failoverTwoPhaseEnv = "IDEM_FAILOVER_TWO_PHASE"
	// failoverDelayEnv is the detection delay (a Go duration, default
	// defaultDetectionDelay).
	failoverDelayEnv = "IDEM_FAILOVER_DELAY"
	// failoverReportEnv names a file to write the gate's JSON report and
	// the failover figures to.
	failoverReportEnv = "IDEM_FAILOVER_REPORT"
	// failoverLagEnv is the replication stall before the kill (a Go
	// duration, default 0: none): the primary's WAL sender is stopped
	// that long before the primary dies (pgtest.Pair.PauseReplication),
	// as a network between the hosts that stalls.
	failoverLagEnv = "IDEM_FAILOVER_LAG"
)

const (
	defaultFailoverRequests = 1000
	// defaultDetectionDelay models how long an HA manager takes to notice
	// that the primary is gone before it promotes the standby.
	defaultDetectionDelay = time.Second
	// readyWait bounds the wait for every instance's /readyz after the
	// promotion.
	readyWait = time.Minute
)

// failoverFigures is what TestFailover measures besides the gate's report.
type failoverFigures struct {
	Standby  string `json:"standby"` // "sync" or "async"
	TwoPhase bool   `json:"two_phase"`
	// DetectionDelayMs is the modelled delay between the kill and the
	// promotion; PromoteMs how long pg_ctl promote -w took.
	DetectionDelayMs float64 `json:"detection_delay_ms"`
	// StallMs is how long the standby received nothing before the kill
	// (failoverLagEnv).
	StallMs   float64 `json:"replication_stall_ms"`
	PromoteMs float64 `json:"promote_ms"`
	// ReadyAfterKillMs: from the kill until every instance's GET /readyz
	// answered 200 again; ReadyAfterPromoteMs the same from the
	// promotion.
	ReadyAfterKillMs    float64 `json:"ready_after_kill_ms"`
	ReadyAfterPromoteMs float64 `json:"ready_after_promote_ms"`
	// FirstNewAcceptanceMs: from the promotion until the first 201 of a
	// key whose first request was sent after it (-1: none).
	FirstNewAcceptanceMs float64 `json:"first_new_acceptance_after_promote_ms"`
	// Unavailable counts the re-sends after 503 STORE_UNAVAILABLE,
	// Connection those after a transport error; Kills the primary's.
	Unavailable int64 `json:"store_unavailable"`
	Connection  int64 `json:"connection_errors"`
	Kills       int   `json:"primary_kills"`
}

// TestFailover (issue 15): two idem serve instances on a multi-host DSN
// over a PostgreSQL primary and its streaming standby take a gate load;
// midway the primary is SIGKILLed (every process of it at once, as a host crash; pgtest.Pair.KillPrimary), the standby promoted
// after a detection delay, and the instances — never restarted — must
// recover by themselves (pgxpool reconnects through the DSN, skipping the
// dead host). After the load every answered key is sent once more. With
// a synchronous standby the gate must pass: every acknowledged key on the
// new primary with its response, no duplicate effect, no false conflict,
// every key settled; and the failover must have been seen (503s or
// dropped connections) and new keys accepted after it. With an
// asynchronous one the test reports what was lost and fails only if the
// harness broke. Sizes and modes come from the environment (the
// constants above).
func TestFailover(t *testing.T) {
	t.Parallel()
	requests := envRequests(t, failoverRequestsEnv, defaultFailoverRequests)
	standby := cmp.Or(os.Getenv(failoverStandbyEnv), "sync")
	if standby != "sync" && standby != "async" {
		t.Fatalf("%s=%q: want sync or async", failoverStandbyEnv, standby)
	}
	delay := defaultDetectionDelay
	if s := os.Getenv(failoverDelayEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: want a duration ≥ 0", failoverDelayEnv, s)
		}
		delay = d
	}
	// fig is written by the hook (under mu) and read after the run.
	var stall time.Duration
	if s := os.Getenv(failoverLagEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: want a duration ≥ 0", failoverLagEnv, s)
		}
		stall = d
	}
	fig := failoverFigures{Standby: standby, TwoPhase: os.Getenv(failoverTwoPhaseEnv) == "1",
		DetectionDelayMs: ms(delay), StallMs: ms(stall), FirstNewAcceptanceMs: -1}

	pair := pgtest.NewPair(t, standby == "sync")
	dsn, err := pair.DSN("failover")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // guards the instants the hook records
	var killed, promoted time.Time
	hook := func(ctx context.Context, m gate.Midpoint) error {
		if stall > 0 {
			resume, err := pair.PauseReplication()
			if err != nil {
				return err
			}
			defer resume()
			m.Say("primary's WAL sender stopped for %v before the kill", stall)
			// A deliberate model delay (the stall's length), not
			// synchronisation.
			select {
			case <-time.After(stall):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := pair.KillPrimary(); err != nil {
			return err
		}
		mu.Lock()
		killed = time.Now()
		fig.Kills++
		mu.Unlock()
		m.Say("primary killed with SIGKILL (all its processes); detection delay %v", delay)
		// With no primary, every instance fails closed: /readyz 503
		// STORE_UNAVAILABLE (before the promotion, which nothing but
		// this hook does).
		if err := awaitReadyz(ctx, m.URLs, http.StatusServiceUnavailable, "STORE_UNAVAILABLE", readyWait); err != nil {
			return err
		}
		// The detection delay is a deliberate model delay (the time an HA
		// manager takes to notice the dead primary), not synchronisation.
		select {
		case <-time.After(time.Until(killed.Add(delay))):
		case <-ctx.Done():
			return ctx.Err()
		}
		start := time.Now()
		if err := pair.Promote(); err != nil {
			return err
		}
		mu.Lock()
		promoted = time.Now()
		fig.PromoteMs = ms(promoted.Sub(start))
		mu.Unlock()
		m.Say("standby promoted in %v", promoted.Sub(start).Round(time.Millisecond))
		if err := awaitReadyz(ctx, m.URLs, http.StatusOK, "", readyWait); err != nil {
			return err
		}
		mu.Lock()
		fig.ReadyAfterKillMs, fig.ReadyAfterPromoteMs = ms(time.Since(killed)), ms(time.Since(promoted))
		mu.Unlock()
		m.Say("every instance ready again")
		return nil
	}

	cfg := failoverGate(t, dsn, gate.WorkloadPayments, requests, hook)
	cfg.TwoPhase = fig.TwoPhase
	rep, err := gate.Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("the gate could not run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	fig.Unavailable, fig.Connection = rep.Resends["STORE_UNAVAILABLE"], rep.Resends["connection"]
	if !promoted.IsZero() {
		fig.FirstNewAcceptanceMs = firstNewAcceptance(rep.Load, promoted)
	}
	t.Log(figuresText(rep, fig))
	writeJSONReport(t, failoverReportEnv, map[string]any{"gate": rep, "failover": fig})

	if fig.Kills != 1 || promoted.IsZero() {
		t.Fatalf("the primary was killed %d times and promoted: %v; want once and true (problems: %q)", fig.Kills, !promoted.IsZero(), rep.Problems)
	}
	if rep.OneTransaction == fig.TwoPhase {
		t.Errorf("the instances ran one-transaction: %v, with %s=%q (serve flags %q)", rep.OneTransaction, failoverTwoPhaseEnv, os.Getenv(failoverTwoPhaseEnv), rep.ServeFlags)
	}
	if rep.Crashes != 0 || rep.InstanceProblems != 0 {
		t.Errorf("instances: %d restarts, %d problems; want none (problems: %q)", rep.Crashes, rep.InstanceProblems, rep.Problems)
	}
	if standby == "async" {
		return // the losses are reported, not judged
	}
	if !rep.Passed {
		var text strings.Builder
		rep.WriteText(&text)
		t.Errorf("the gate failed after a failover to a synchronous standby:\n%s", text.String())
	}
	if fig.Unavailable+fig.Connection == 0 {
		t.Errorf("no request got 503 STORE_UNAVAILABLE or a connection error: the failover was not under load (re-sends %v)", rep.Resends)
	}
	if fig.FirstNewAcceptanceMs < 0 {
		t.Error("no key first sent after the promotion was accepted (201)")
	}
}

// awaitReadyz polls every url's GET /readyz until all answered status —
// with the problem code when code is set — or timeout passes.
func awaitReadyz(ctx context.Context, urls []string, status int, code string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	for _, u := range urls {
		last := "no answer"
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/readyz", nil)
			if err != nil {
				return err
			}
			if resp, err := client.Do(req); err == nil {
				var p struct{ Code string }
				json.NewDecoder(resp.Body).Decode(&p)
				resp.Body.Close()
				if resp.StatusCode == status && (code == "" || p.Code == code) {
					break
				}
				last = resp.Status + " " + p.Code
			} else {
				last = err.Error()
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s/readyz not %d %s within %v (last: %s)", u, status, code, timeout, last)
			case <-time.After(20 * time.Millisecond): // polling interval
			}
		}
	}
	return nil
}

// firstNewAcceptance returns the milliseconds from promoted to the first
// 201 of a key whose first request was sent after promoted, -1 if none.
func firstNewAcceptance(res gate.LoadResult, promoted time.Time) float64 {
	var first time.Time
	for _, k := range res.Keys {
		if !k.Start.After(promoted) {
			continue
		}
		for _, a := range k.Answers {
			if a.Status == http.StatusCreated && (first.IsZero() || a.At.Before(first)) {
				first = a.At
			}
		}
	}
	if first.IsZero() {
		return -1
	}
	return ms(first.Sub(promoted))
}

// figuresText is the test's one readable block of figures.
func figuresText(rep *gate.Report, f failoverFigures) string {
	var b strings.Builder
	style := "one-transaction"
	if f.TwoPhase {
		style = "two-phase"
	}
	fmt.Fprintf(&b, "failover, %s standby, %s payments, gate passed: %v (run %s, seed %d)\n", f.Standby, style, rep.Passed, rep.Run, rep.Seed)
	fmt.Fprintf(&b, "  load       %d keys × %d retries = %d planned, %d requests sent in %.1f s, %d keys re-sent after the load\n",
		rep.Keys, rep.Retries, rep.Planned, rep.Requests, rep.LoadSeconds, rep.ResentKeys)
	fmt.Fprintf(&b, "  outage     %d × 503 STORE_UNAVAILABLE, %d connection errors; all re-sends %v\n", f.Unavailable, f.Connection, rep.Resends)
	fmt.Fprintf(&b, "  stall      the standby received nothing for %.0f ms before the kill\n", f.StallMs)
	fmt.Fprintf(&b, "  recovery   detection delay %.0f ms, promote %.0f ms; every /readyz 200 %.0f ms after the kill (%.0f ms after the promotion); first new key accepted %.0f ms after the promotion\n",
		f.DetectionDelayMs, f.PromoteMs, f.ReadyAfterKillMs, f.ReadyAfterPromoteMs, f.FirstNewAcceptanceMs)
	fmt.Fprintf(&b, "  losses     %d acknowledged operations lost, %d keys executed again, %d duplicate effects, %d digest mismatches, %d false conflicts\n",
		rep.AcknowledgedLost, rep.ReExecuted, rep.DuplicateEffects, rep.ReplayDigestMismatches, rep.FalseConflicts)
	fmt.Fprintf(&b, "  outcomes   %d succeeded, %d refused (AMOUNT_LIMIT), %d/%d different payloads refused, %d unanswered requests, %d unexpected answers; instances restarted %d, instance problems %d",
		rep.Succeeded, rep.Refused, rep.ConflictsRefused, rep.ConflictsSent, rep.UnansweredRequests, rep.UnexpectedAnswers, rep.Crashes, rep.InstanceProblems)
	for _, p := range rep.Problems {
		fmt.Fprintf(&b, "\n  problem: %s", p)
	}
	return b.String()
}

// envRequests reads a number of planned requests (at least 20) from the
// environment variable env; def when it is unset.
func envRequests(t *testing.T, env string, def int) int {
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 20 {
		t.Fatalf("%s=%q: want a number of requests ≥ 20", env, s)
	}
	return n
}

// failoverGate is the gate run of the failover tests: workload through
// two instances on dsn, requests planned, hook called midway, every
// answered key re-sent after the load.
func failoverGate(t *testing.T, dsn, workload string, requests int, hook func(context.Context, gate.Midpoint) error) gate.Config {
	return gate.Config{
		DSN: dsn, Bin: idemBin, Workload: workload, Instances: 2, Requests: requests,
		ConflictRate: gate.DefaultConflictRate, RefusalRate: gate.DefaultRefusalRate,
		// Two keys' storms at once (the gate's default is one): the kill
		// always finds requests in flight, some of them in a commit.
		Concurrency: 2 * gate.DefaultRetries,
		Midway:      hook, Resend: true,
		// The outage stalls reservations for seconds: the latency gate
		// would judge the failover, not the reservation (docs/gate.md).
		LatencyBudget: time.Hour,
		Progress:      testWriter{t},
	}
}

// writeJSONReport writes v, indented, to the file the environment
// variable env names, if any.
func writeJSONReport(t *testing.T, env string, v any) {
	path := os.Getenv(env)
	if path == "" {
		return
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		t.Errorf("writing %s: %v", path, err)
	}
}

// testWriter writes the gate's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
