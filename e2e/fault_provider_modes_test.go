package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestFaultProviderModes (SPEC E2, the provider's own modes): a provider
// that declines a new key for good gives the transfer a stored 422
// TRANSFER_DECLINED (FAILED_FINAL), replayed byte for byte and never
// executed; a provider that executes and then answers 503 ("fail-after")
// gives 409 OUTCOME_UNKNOWN — a 5xx is no evidence and is never stored —
// and the retry settles the transfer SUCCEEDED from the provider's lookup,
// executed once.
// Proves threat:lost-downstream-answer (docs/threat-model.md).
func TestFaultProviderModes(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		prov := f.provider()
		s := f.serve("A", nil, true, "--provider", prov.url, "--provider-timeout", "2s")
		control := func(mode string) {
			t.Helper()
			if r, err := f.do(prov, http.MethodPost, "/control", "", nil, `{"mode":"`+mode+`"}`); err != nil || r.status != http.StatusOK {
				t.Fatalf("provider mode %s: %v %v", mode, r, err)
			}
		}
		state := func(op string) string {
			t.Helper()
			var v struct{ State string }
			g, err := f.do(s, http.MethodGet, "/v1/operations/"+op, "demo", nil, "")
			if err != nil || g.status != http.StatusOK || json.Unmarshal(g.body, &v) != nil {
				t.Fatalf("GET /v1/operations/%s: %v %v", op, g, err)
			}
			return v.State
		}

		control("decline")
		dkey, dbody := f.key("decline"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_declined"}`
		declined := f.mustPost(s, "/v1/transfers", "demo", dkey, dbody)
		wantProblem(t, "declined transfer", declined, http.StatusUnprocessableEntity, "TRANSFER_DECLINED")
		control("ok") // the key stays declined: the provider's refusal is final for it
		again := f.mustPost(s, "/v1/transfers", "demo", dkey, dbody)
		wantReplay(t, "retry of a declined transfer", declined, again)
		if st := state(declined.header.Get("Idempotency-Operation")); st != "FAILED_FINAL" {
			t.Errorf("declined transfer is %s; want FAILED_FINAL", st)
		}

		control("fail-after")
		key, body := f.key("fail-after"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1"}`
		first := f.mustPost(s, "/v1/transfers", "demo", key, body)
		op := first.header.Get("Idempotency-Operation")
		if msg := problemErr(first, http.StatusConflict, "OUTCOME_UNKNOWN"); msg != "" || op == "" {
			t.Fatalf("transfer the provider executed and then failed: %s; want 409 OUTCOME_UNKNOWN", msg)
		}
		retry := f.mustPost(s, "/v1/transfers", "demo", key, body) // still fail-after: it only fails NEW keys
		if retry.status != http.StatusCreated || retry.header.Get("Idempotency-Operation") != op {
			t.Fatalf("retry: %v %v; want the transfer's 201 under %s", retry, retry.header, op)
		}
		if st := state(op); st != "SUCCEEDED" {
			t.Errorf("transfer is %s; want SUCCEEDED", st)
		}
		f.mustPost(s, "/v1/transfers", "demo", key, body)
		f.check(allow{})
		if f.last.ProviderExecuted != 1 {
			t.Errorf("provider executed %d transfers; want 1 (the declined key never)", f.last.ProviderExecuted)
		}
	})
}
