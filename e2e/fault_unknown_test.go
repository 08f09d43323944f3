package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFaultUnknown (V1: no UNKNOWN re-executed before reconciliation;
// SPEC E2; the first finding of the effects issue): the provider executes
// a transfer but withholds its answer (mode "hang") until the server's
// provider call times out, so the operation is UNKNOWN (409
// OUTCOME_UNKNOWN). Then the provider fails every NEW key (mode "fail")
// — which must not be read as "nothing happened". Without any client
// retry, the server's recovery worker asks the provider about the
// downstream key, finds the execution, and settles the transfer
// SUCCEEDED; the retry then replays the transfer's own 201 (Location and
// body), under the same operation ID, and the provider executed once.
// Proves threat:lost-downstream-answer (docs/threat-model.md).
func TestFaultUnknown(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		prov := f.provider()
		s := f.serve("A", nil, true, "--provider", prov.url, "--provider-timeout", "300ms", "--recover-interval", "200ms")
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
		if msg := problemErr(first, http.StatusConflict, "OUTCOME_UNKNOWN"); msg != "" || op == "" {
			t.Fatalf("transfer whose provider call timed out: %s %v; want 409 OUTCOME_UNKNOWN naming the operation", msg, first.header)
		}
		// The server gave up after --provider-timeout. On a loaded machine
		// the provider may not have run the request yet when the 409
		// arrives (it executes whenever it gets to it, then holds): wait
		// for the execution before switching modes, bounded, then count.
		var executed string
		await(t, "the provider executes the timed-out transfer", func() bool {
			r, err := prov.send(http.MethodGet, "/stats", "", nil, "")
			var st struct{ Executed int }
			executed = fmt.Sprint(r.status, " ", string(r.body), " ", err)
			return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &st) == nil && st.Executed >= 1
		}, &executed)
		if n := f.takeSnapshot().ProviderExecuted; n != 1 {
			t.Fatalf("provider executed %d transfers; want 1", n)
		}
		control("fail")
		settledAt := time.Now()
		var v struct{ State string }
		await(t, "the worker settles "+op, func() bool {
			g, err := f.do(s, http.MethodGet, "/v1/operations/"+op, "demo", nil, "")
			return err == nil && g.status == http.StatusOK && json.Unmarshal(g.body, &v) == nil && v.State == "SUCCEEDED"
		})
		t.Logf("settled by the worker %v after the provider started failing new keys", time.Since(settledAt).Round(time.Millisecond))
		retry := f.mustPost(s, "/v1/transfers", "demo", key, body)
		var tr struct{ ID, Payee string }
		if retry.status != http.StatusCreated || retry.header.Get("Idempotency-Operation") != op ||
			json.Unmarshal(retry.body, &tr) != nil || tr.ID != "tr_"+strings.TrimPrefix(op, "op_") ||
			retry.header.Get("Location") != "/v1/transfers/"+tr.ID || tr.Payee != "acct_1" {
			t.Fatalf("retry after the settlement: %v %v; want the transfer's 201", retry, retry.header)
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
