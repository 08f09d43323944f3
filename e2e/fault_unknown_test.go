package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestFaultUnknown (V1: no UNKNOWN re-executed before reconciliation;
// SPEC E2): the provider executes a transfer but withholds its answer
// (mode "hang") until the server's provider call times out, so the
// operation is UNKNOWN. Retries meanwhile answer 409 OUTCOME_UNKNOWN (or
// IN_PROGRESS) and never execute anything new; once the provider answers
// again, the operation is settled — by a retry re-sending the SAME
// downstream key, or by the recovery worker asking the provider — and
// replayed from then on. The provider executed the transfer once.
func TestFaultUnknown(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		prov := f.provider()
		s := f.serve("A", nil, true, "--provider", prov.url, "--recover-interval", "200ms")
		control := func(mode string) {
			t.Helper()
			r, err := f.do(prov, http.MethodPost, "/control", "", nil, `{"mode":"`+mode+`"}`)
			if err != nil || r.status != http.StatusOK {
				t.Fatalf("provider mode %s: %v %v", mode, r, err)
			}
		}
		key, body := f.key("unknown"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1"}`
		control("hang")
		first := f.mustPost(s, "/v1/transfers", "demo", key, body)
		op := first.header.Get("Idempotency-Operation")
		if first.status/100 == 2 || op == "" {
			t.Fatalf("transfer whose provider call timed out: %v %v; want a refusal naming the operation", first, first.header)
		}
		var v struct{ State string }
		if g, err := f.do(s, http.MethodGet, "/v1/operations/"+op, "demo", nil, ""); err != nil || json.Unmarshal(g.body, &v) != nil || v.State != "UNKNOWN" {
			t.Fatalf("GET /v1/operations/%s: %v %v; want state UNKNOWN", op, g, err)
		}
		if n := f.takeSnapshot().ProviderExecuted; n != 1 {
			t.Fatalf("provider executed %d transfers; want 1", n)
		}
		control("ok")
		ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
		defer cancel()
		for {
			r := f.mustPost(s, "/v1/transfers", "demo", key, body)
			if r.status/100 == 2 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("not settled within %v: %v", awaitTimeout, r)
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
		for range pick(2, 10) {
			f.mustPost(s, "/v1/transfers", "demo", key, body)
		}
		f.check(allow{})
		if f.last.ProviderExecuted != 1 {
			t.Errorf("provider executed %d transfers in all; want exactly 1", f.last.ProviderExecuted)
		}
	})
}
