package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// crashDeadline bounds each scenario's retries and polls after the restart.
const crashDeadline = 30 * time.Second

// Flags of every "idem serve" in the crash scenarios: the two-phase style
// (the seams after-reserve and before-commit of a reservation), a short lease and a
// fast recovery worker, so a crashed owner's operation is taken over soon.
var crashFlags = []string{twoPhaseFlag, "--lease", "1s", "--recover-interval", "200ms"}

// TestFaultCrashPayments (V1: SIGKILL): idem serve dies by SIGKILL at the
// failpoints after-reserve, before-commit and after-commit of POST
// /v1/payments; a restarted server (no failpoints, same database) and the
// client's retries end with exactly one payment and one outbox row for
// the key, and every later retry replays the first 201 byte for byte.
// After after-commit the first 201 seen is already a replay of the
// committed outcome; before it, nothing was committed, so it is not.
// On SQLite, PostgreSQL and MariaDB.
// Proves threat:crashed-owner-rerun (docs/threat-model.md).
func TestFaultCrashPayments(t *testing.T) {
	for _, seam := range []string{"after-reserve", "before-commit", "after-commit"} {
		t.Run(seam, func(t *testing.T) {
			t.Parallel()
			eachEngine(t, func(t *testing.T, dsn string) { crashPayment(t, dsn, seam) })
		})
	}
}

// crashAt starts server A with flags and IDEM_FAILPOINTS=<seam>=kill,
// POSTs a payment with key and body, which must break the connection,
// and checks that A died by SIGKILL; it returns when A was started and
// when it was found dead.
func (f *faultRun) crashAt(seam, key, body string, flags ...string) (began, killed time.Time) {
	f.t.Helper()
	began = time.Now()
	a := f.serve("A", []string{"IDEM_FAILPOINTS=" + seam + "=kill"}, false, flags...)
	if r, err := f.post(a, "/v1/payments", "demo", key, body); err == nil {
		f.t.Fatalf("POST with %s=kill answered %v; want the connection to break", seam, r)
	}
	wantKilled(f.t, a)
	return began, time.Now()
}

func crashPayment(t *testing.T, dsn, seam string) {
	f := newFault(t, dsn)
	key, body := f.key("crash-"+seam), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`

	began, killed := f.crashAt(seam, key, body, crashFlags...)

	b := f.serve("B", nil, true, crashFlags...)
	restarted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), crashDeadline)
	defer cancel()
	var first reply
	var named []string // operation IDs the 409s named
	for first.status != http.StatusCreated {
		if ctx.Err() != nil {
			t.Fatalf("no 201 within %v of the restart", crashDeadline)
		}
		r := f.mustPost(b, "/v1/payments", "demo", key, body, "Prefer", "wait=2")
		switch {
		case r.status == http.StatusCreated:
			first = r
		case problemErr(r, http.StatusConflict, "IN_PROGRESS") == "":
			if op := r.header.Get("Idempotency-Operation"); op == "" {
				t.Fatalf("409 IN_PROGRESS without Idempotency-Operation: %v %v", r, r.header)
			} else if msg := inProgressErr(r, op); msg != "" {
				t.Errorf("retry after the restart: %s", msg)
			} else {
				named = append(named, op)
				if g, err := f.do(b, http.MethodGet, "/v1/operations/"+op, "demo", nil, ""); err != nil || g.status != http.StatusOK {
					t.Errorf("GET of the Link the 409 named (%s): %v %v; want 200", op, g, err)
				}
			}
			sleepCtx(ctx, retryAfter(r))
		default:
			t.Fatalf("retry after the restart: %v %v; want 201 or 409 IN_PROGRESS", r, r.header)
		}
	}
	settled := time.Now()
	// One operation ID for life: the 201 continues the operation every
	// 409 named (a takeover under owner generation + 1), whose Link still
	// answers.
	op := first.header.Get("Idempotency-Operation")
	for _, n := range named {
		if n != op {
			t.Errorf("a 409 named operation %s, the 201 is operation %s; want the same operation", n, op)
		}
	}
	if g, err := f.do(b, http.MethodGet, "/v1/operations/"+op, "demo", nil, ""); err != nil || g.status != http.StatusOK {
		t.Errorf("GET /v1/operations/%s after the 201: %v %v; want 200", op, g, err)
	}
	replayed := first.header.Get("Idempotent-Replayed") == "true"
	switch {
	case seam == "after-commit" && !replayed:
		t.Errorf("first 201 after a crash after the commit was executed again (no Idempotent-Replayed: true): %v %v", first, first.header)
	case seam != "after-commit" && replayed:
		t.Errorf("first 201 after a crash at %s is a replay, but nothing was committed before the crash: %v %v", seam, first, first.header)
	}
	f.mustPost(b, "/v1/payments", "demo", key, body) // a further retry: a replay
	counts := f.check(allow{Errors: true})
	if counts["executed"]+counts["replayed"] < 2 || (seam != "after-commit" && counts["executed"] != 1) {
		t.Errorf("answers %v; want the outcome at least twice, executed once unless committed before the crash", counts)
	}
	t.Logf("%s: killed after %v, restarted in %v, 201 %v after the restart (replayed=%v)",
		seam, killed.Sub(began).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
		settled.Sub(restarted).Round(time.Millisecond), replayed)
}

// TestFaultCrashTransfer (V1: SIGKILL after downstream success): idem
// serve dies by SIGKILL right after the provider executed a transfer
// (failpoint after-downstream). The restarted server settles the
// operation — its recovery worker asks the provider by downstream key, or
// a retry that finds it UNKNOWN re-sends the SAME key — and until then
// every retry answers 409 IN_PROGRESS or OUTCOME_UNKNOWN and none
// executes anew; afterwards retries replay the settled outcome; the
// provider executed exactly once (no UNKNOWN re-executed before
// reconciliation).
// In both styles: two-phase (reservation, BeginEffect, answer, outcome)
// and one-transaction (the record with the downstream key in one commit,
// the answer held in memory and lost with the process) — there also at
// the failpoint before-commit, once the answer is held and before the
// transaction that would store it with the outcome.
// Proves threat:lost-downstream-answer and threat:effect-answer-async-loss
// (docs/threat-model.md): the answer that dies with the server is asked
// for again with the durable key.
func TestFaultCrashTransfer(t *testing.T) {
	styles := map[string][]string{
		"two-phase": crashFlags,
		"one-tx":    {oneTxFlag, "--lease", "1s", "--recover-interval", "200ms"},
	}
	for style, styleFlags := range styles {
		t.Run(style, func(t *testing.T) { crashTransfer(t, "after-downstream", styleFlags) })
	}
	t.Run("one-tx/before-commit", func(t *testing.T) { crashTransfer(t, "before-commit", styles["one-tx"]) })
}

// crashTransfer is TestFaultCrashTransfer for a failpoint and the serve
// flags of a style.
func crashTransfer(t *testing.T, seam string, styleFlags []string) {
	eachEngine(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		key, body := f.key("crash-transfer"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1"}`
		prov := f.provider()
		// The lease bounds the execution (Operation.MaxDuration defaults
		// to it): the transfer's four registry and provider calls must
		// reach the failpoint within it, which 1 s did not always allow
		// on a loaded machine under -race (503 at BeginEffect).
		flags := append([]string{"--provider", prov.url}, append(slices.Clone(styleFlags), "--lease", "3s")...)

		began := time.Now()
		a := f.serve("A", []string{"IDEM_FAILPOINTS=" + seam + "=kill"}, false, flags...)
		if r, err := f.post(a, "/v1/transfers", "demo", key, body); err == nil {
			t.Fatalf("POST with %s=kill answered %v; want the connection to break", seam, r)
		}
		wantKilled(t, a)
		killed := time.Now()
		if n := f.takeSnapshot().ProviderExecuted; n != 1 {
			t.Fatalf("provider executed %d transfers before the crash; want 1", n)
		}

		b := f.serve("B", nil, true, flags...)
		restarted := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), crashDeadline)
		defer cancel()

		// Retry and poll until an answer carries the outcome.
		var op string
		var outcome reply
		for outcome.status == 0 {
			if ctx.Err() != nil {
				t.Fatalf("operation %q not settled within %v of the restart", op, crashDeadline)
			}
			r := f.mustPost(b, "/v1/transfers", "demo", key, body)
			if got := r.header.Get("Idempotency-Operation"); got != "" {
				op = got
			}
			var pr problem
			json.Unmarshal(r.body, &pr)
			switch {
			case r.status/100 == 2:
				outcome = r
				continue
			case r.status == http.StatusConflict && (pr.Code == "IN_PROGRESS" || pr.Code == "OUTCOME_UNKNOWN"):
			default:
				t.Fatalf("retry before the settlement: %v %v; want 409 IN_PROGRESS or OUTCOME_UNKNOWN", r, r.header)
			}
			if op == "" {
				t.Fatalf("409 without Idempotency-Operation: %v %v", r, r.header)
			}
			g, err := f.do(b, http.MethodGet, "/v1/operations/"+op, "demo", nil, "")
			var v struct{ State string }
			if err != nil || g.status != http.StatusOK || json.Unmarshal(g.body, &v) != nil {
				t.Fatalf("GET /v1/operations/%s: %v %v", op, g, err)
			}
			if v.State != "SUCCEEDED" {
				sleepCtx(ctx, 200*time.Millisecond) // the worker runs every 200ms; poll at that pace
			}
		}
		settled := time.Now()
		// However it was settled (the worker's lookup, or a retry's), the
		// stored outcome is the transfer's own rendering: 201, Location
		// and the Transfer, the same shape as an uninterrupted run.
		var tr struct {
			ID, Amount, Currency, Payee string
			ProviderTransfer            string `json:"provider_transfer"`
			CreatedAt                   string `json:"created_at"`
		}
		if outcome.status != http.StatusCreated || json.Unmarshal(outcome.body, &tr) != nil ||
			tr.ID != "tr_"+strings.TrimPrefix(op, "op_") || outcome.header.Get("Location") != "/v1/transfers/"+tr.ID ||
			tr.Payee != "acct_1" || tr.Currency != "EUR" || !strings.HasPrefix(tr.ProviderTransfer, "tr_") || tr.CreatedAt == "" {
			t.Errorf("first outcome after the restart: %v %v; want 201 with Location /v1/transfers/%s and the Transfer",
				outcome, outcome.header, "tr_"+strings.TrimPrefix(op, "op_"))
		}
		g, err := f.do(b, http.MethodGet, "/v1/operations/"+op, "demo", nil, "")
		var v struct {
			State  string
			Status int
			Links  struct{ Resource string }
		}
		if err != nil || json.Unmarshal(g.body, &v) != nil || g.status != http.StatusOK || v.State != "SUCCEEDED" ||
			v.Status != outcome.status || v.Links.Resource != outcome.header.Get("Location") {
			t.Errorf("GET /v1/operations/%s after the settlement: %v %v; want SUCCEEDED, status %d, resource %q", op, g, err, outcome.status, outcome.header.Get("Location"))
		}
		awaitLog(t, b, "settled on evidence") // logged right after the settlement it reports
		if !strings.Contains(b.child.Log(), op) {
			t.Errorf("the restarted server's log never names %s", op)
		}
		f.mustPost(b, "/v1/transfers", "demo", key, body) // a further retry: a replay
		if f.check(allow{Errors: true}); f.last.ProviderExecuted != 1 {
			t.Errorf("provider executed %d transfers in all; want exactly 1", f.last.ProviderExecuted)
		}
		t.Logf("%s: killed after %v, restarted in %v, settled %v after the restart", seam,
			killed.Sub(began).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
			settled.Sub(restarted).Round(time.Millisecond))
	})
}
