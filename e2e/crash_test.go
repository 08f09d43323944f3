package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// crashDeadline bounds each scenario's retries and polls after the restart.
const crashDeadline = 30 * time.Second

// Flags of every "idem serve" in the crash scenarios: a short lease and a
// fast recovery worker, so a crashed owner's operation is taken over soon.
var crashFlags = []string{"--lease", "1s", "--recover-interval", "200ms"}

// TestCrashPayments: idem serve dies by SIGKILL at the failpoints
// after-reserve, before-commit and after-commit of POST /v1/payments; a
// restarted server (no failpoints, same database) and the client's retries
// end with exactly one payment and one outbox row for the key, and every
// later retry replays the first 201 byte for byte. After after-commit the
// first 201 seen is already a replay of the committed outcome.
func TestCrashPayments(t *testing.T) {
	for _, seam := range []string{"after-reserve", "before-commit", "after-commit"} {
		t.Run(seam, func(t *testing.T) {
			t.Parallel()
			eachDB(t, func(t *testing.T, dsn string) { crashPayment(t, dsn, seam) })
		})
	}
}

func crashPayment(t *testing.T, dsn, seam string) {
	h := newHistory(t)
	key := "k-crash-" + seam
	serveArgs := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dsn}, crashFlags...)

	began := time.Now()
	a := startChild(t, []string{"IDEM_FAILPOINTS=" + seam + "=kill"}, serveArgs...)
	if r, err := h.do(a, http.MethodPost, "/v1/payments", "demo", postHeader(key), payBody); err == nil {
		t.Fatalf("POST with %s=kill answered %v; want the connection to break", seam, r)
	}
	wantKilled(t, a)
	killed := time.Now()

	b := startServer(t, dsn, crashFlags...)
	restarted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), crashDeadline)
	defer cancel()
	var first reply
	for first.status != http.StatusCreated {
		if ctx.Err() != nil {
			t.Fatalf("no 201 within %v of the restart", crashDeadline)
		}
		r, err := h.do(b, http.MethodPost, "/v1/payments", "demo", postHeader(key, "Prefer", "wait=2"), payBody)
		if err != nil {
			t.Fatalf("retry after the restart: %v", err)
		}
		switch {
		case r.status == http.StatusCreated:
			first = r
		case r.status == http.StatusConflict && problemErr(r, http.StatusConflict, "IN_PROGRESS") == "":
			if op := r.header.Get("Idempotency-Operation"); op == "" {
				t.Fatalf("409 IN_PROGRESS without Idempotency-Operation: %v %v", r, r.header)
			} else if msg := inProgressErr(r, op); msg != "" {
				t.Errorf("retry after the restart: %s", msg)
			}
			sleepCtx(ctx, retryAfter(r))
		default:
			t.Fatalf("retry after the restart: %v %v; want 201 or 409 IN_PROGRESS", r, r.header)
		}
	}
	settled := time.Now()

	op := first.header.Get("Idempotency-Operation")
	if first.header.Get("Idempotency-Contract") != contract || op == "" || first.header.Get("Location") == "" {
		t.Errorf("first 201 after the restart: %v %v; want Idempotency-Contract, Idempotency-Operation and Location", first, first.header)
	}
	replayed := first.header.Get("Idempotent-Replayed") == "true"
	switch {
	case seam == "after-commit" && !replayed:
		t.Errorf("first 201 after a crash after the commit was executed again (no Idempotent-Replayed: true): %v %v", first, first.header)
	case seam != "after-commit" && replayed:
		t.Errorf("first 201 after a crash at %s is a replay, but nothing was committed before the crash: %v %v", seam, first, first.header)
	}
	p := payment(t, "first 201 after the restart", first.body)
	if p["amount"] != "12.50" || p["payee"] != "acct_1" {
		t.Errorf("first 201 after the restart: payment %v; want amount 12.50 to acct_1", p)
	}

	again, err := h.do(b, http.MethodPost, "/v1/payments", "demo", postHeader(key), payBody)
	if err != nil {
		t.Fatalf("further retry: %v", err)
	}
	wantReplay(t, "further retry", first, again)
	if c := countRows(t, dsn, op); c != (counts{1, 1, 1, 1}) {
		t.Errorf("rows after the crash at %s and the retries: %+v; want exactly one payment and one outbox row, for %s", seam, c, op)
	}
	t.Logf("%s: killed after %v, restarted in %v, 201 %v after the restart (replayed=%v)",
		seam, killed.Sub(began).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
		settled.Sub(restarted).Round(time.Millisecond), replayed)
}

// TestCrashTransfer: idem serve dies by SIGKILL right after the provider
// executed a transfer (failpoint after-downstream). The restarted server's
// recovery worker asks the provider by downstream key and reconciles the
// operation to SUCCEEDED; until then every retry answers 409 and none
// executes; afterwards retries replay the reconciled outcome (the worker's
// stored 200 {"operation_id","state":"SUCCEEDED","reconciled":true}, not a
// 201 Transfer: the provider's answer alone does not rebuild that body);
// the provider executed exactly once.
func TestCrashTransfer(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		h := newHistory(t)
		key := "k-crash-transfer"
		prov := startChild(t, nil, "provider", "--addr", "127.0.0.1:0")
		serveArgs := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dsn, "--provider", prov.url}, crashFlags...)

		began := time.Now()
		a := startChild(t, []string{"IDEM_FAILPOINTS=after-downstream=kill"}, serveArgs...)
		if r, err := h.do(a, http.MethodPost, "/v1/transfers", "demo", postHeader(key), payBody); err == nil {
			t.Fatalf("POST with after-downstream=kill answered %v; want the connection to break", r)
		}
		wantKilled(t, a)
		killed := time.Now()
		if n := executed(t, h, prov); n != 1 {
			t.Fatalf("provider executed %d transfers before the crash; want 1", n)
		}

		b := startServer(t, dsn, append([]string{"--provider", prov.url}, crashFlags...)...)
		restarted := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), crashDeadline)
		defer cancel()

		// Retry and poll until the operation is SUCCEEDED. Every retry
		// before that must be refused with 409; a 2xx is accepted only as a
		// replay, which means the reconciliation has happened.
		var op string
		var replay reply
		byRetry := false
		retries, conflicts := 0, map[string]int{}
		for replay.status == 0 {
			if ctx.Err() != nil {
				t.Fatalf("operation %q not SUCCEEDED within %v of the restart (409s: %v)", op, crashDeadline, conflicts)
			}
			r, err := h.do(b, http.MethodPost, "/v1/transfers", "demo", postHeader(key), payBody)
			if err != nil {
				t.Fatalf("retry after the restart: %v", err)
			}
			retries++
			if got := r.header.Get("Idempotency-Operation"); got != "" {
				if op != "" && got != op {
					t.Fatalf("retry answered for operation %s, earlier for %s", got, op)
				}
				op = got
			}
			var pr problem
			json.Unmarshal(r.body, &pr)
			switch {
			case r.status/100 == 2 && r.header.Get("Idempotent-Replayed") == "true":
				replay = r
				continue
			case r.status == http.StatusCreated:
				// A retry that found the operation UNKNOWN settled it by
				// re-sending the same downstream key (ReplayUnknown); the
				// provider count below proves nothing ran twice.
				replay, byRetry = r, true
				continue
			case r.status/100 == 2:
				t.Fatalf("retry answered %d without Idempotent-Replayed: %v %v", r.status, r, r.header)
			case r.status == http.StatusConflict && (pr.Code == "IN_PROGRESS" || pr.Code == "OUTCOME_UNKNOWN"):
				conflicts[pr.Code]++
				if msg := problemErr(r, http.StatusConflict, pr.Code); msg != "" {
					t.Errorf("retry before the reconciliation: %s", msg)
				}
			default:
				t.Fatalf("retry before the reconciliation: %v %v; want 409 IN_PROGRESS or OUTCOME_UNKNOWN", r, r.header)
			}
			if op == "" {
				t.Fatalf("409 without Idempotency-Operation: %v %v", r, r.header)
			}
			g, err := h.do(b, http.MethodGet, "/v1/operations/"+op, "demo", nil, "")
			if err != nil || g.status != http.StatusOK {
				t.Fatalf("GET /v1/operations/%s: %v %v", op, g, err)
			}
			var v struct{ State string }
			if err := json.Unmarshal(g.body, &v); err != nil {
				t.Fatalf("GET /v1/operations/%s: %s: %v", op, g.body, err)
			}
			if v.State != "SUCCEEDED" {
				// The worker runs every 200ms; poll at that pace.
				sleepCtx(ctx, 200*time.Millisecond)
			}
		}
		settled := time.Now()

		// The stored response of a reconciliation by the recovery worker
		// (recovery.Worker): 200 {"operation_id", "state", "reconciled"}.
		var rb struct {
			OperationID string `json:"operation_id"`
			State       string `json:"state"`
			Reconciled  bool   `json:"reconciled"`
		}
		if byRetry {
			rb.OperationID, rb.State, rb.Reconciled = op, "SUCCEEDED", true // the transfer itself was answered
		} else if err := json.Unmarshal(replay.body, &rb); err != nil || replay.status != http.StatusOK ||
			replay.header.Get("Idempotency-Operation") != op || replay.header.Get("Idempotency-Contract") != contract ||
			rb != (struct {
				OperationID string `json:"operation_id"`
				State       string `json:"state"`
				Reconciled  bool   `json:"reconciled"`
			}{op, "SUCCEEDED", true}) {
			t.Errorf("replay after the reconciliation: %v %v; want 200 {operation_id %s, state SUCCEEDED, reconciled true} with Idempotency-Operation and Idempotency-Contract", replay, replay.header, op)
		}
		g, err := h.do(b, http.MethodGet, "/v1/operations/"+op, "demo", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			State  string
			Status int
			Links  struct{ Resource string }
		}
		json.Unmarshal(g.body, &v)
		if g.status != http.StatusOK || v.State != "SUCCEEDED" || v.Status != replay.status || v.Links.Resource != replay.header.Get("Location") {
			t.Errorf("GET /v1/operations/%s after the reconciliation: %v; want SUCCEEDED, status %d, resource %q", op, g, replay.status, replay.header.Get("Location"))
		}
		// Settled either by the worker's provider lookup or, when a retry
		// found it UNKNOWN first, by that retry re-sending the same key.
		if log := b.log.String(); !strings.Contains(log, op) || (!strings.Contains(log, "recovery: reconciled from the provider") &&
			!strings.Contains(log, "unknown operation settled by replay")) {
			t.Errorf("the restarted server did not log a reconciliation of %s", op)
		}
		again, err := h.do(b, http.MethodPost, "/v1/transfers", "demo", postHeader(key), payBody)
		if err != nil {
			t.Fatalf("further retry: %v", err)
		}
		wantReplay(t, "further retry", replay, again)
		if n := executed(t, h, prov); n != 1 {
			t.Errorf("provider executed %d transfers in all; want exactly 1", n)
		}
		t.Logf("after-downstream: killed after %v, restarted in %v, reconciled and replayed %v after the restart; %d retries (409s: %v)",
			killed.Sub(began).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
			settled.Sub(restarted).Round(time.Millisecond), retries, conflicts)
	})
}

// executed returns the provider's count of executed transfers.
func executed(t *testing.T, h *history, prov *server) int {
	t.Helper()
	r, err := h.do(prov, http.MethodGet, "/stats", "", nil, "")
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET provider /stats: %v %v", r, err)
	}
	var s struct {
		Executed int `json:"executed"`
	}
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatalf("GET provider /stats: %s: %v", r.body, err)
	}
	return s.Executed
}
