package payments

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func testCreate(t *testing.T, b *testBundle) {
	r, p := b.mustCreate(t, "tok-alice", "k1", `{"amount": "12.5", "currency": "EUR", "payee": "acct_1", "memo": "rent <&>"}`)
	op := r.header.Get("Idempotency-Operation")
	if !strings.HasPrefix(op, "op_") || r.header.Get("Idempotency-Contract") != idem.ContractVersion {
		t.Fatalf("contract headers: %v", r.header)
	}
	if p.ID != PaymentID(op) || strings.Contains(p.ID, "op_") || strings.Contains(p.ID, "k1") {
		t.Errorf("payment id %q, operation %q", p.ID, op)
	}
	if got := r.header.Get("Location"); got != "/v1/payments/"+p.ID {
		t.Errorf("Location %q", got)
	}
	if got := r.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if p.Amount != "12.50" || p.Currency != "EUR" || p.Payee != "acct_1" || p.Memo == nil || *p.Memo != "rent <&>" || !bytes.Contains(r.body, []byte(`"rent <&>"`)) || p.CreatedAt == "" {
		t.Errorf("payment %+v", p)
	}
	// The resource and the operation are readable by their owner.
	g := b.do(t, http.MethodGet, "/v1/payments/"+p.ID, "tok-alice", "", "")
	if g.status != http.StatusOK || !bytes.Equal(g.body, r.body) {
		t.Errorf("GET payment: %v, want the created body %s", g, r.body)
	}
	o := b.do(t, http.MethodGet, "/v1/operations/"+op, "tok-alice", "", "")
	var v struct {
		OperationID string `json:"operation_id"`
		Operation   string
		State       idem.State
		Status      int
		CreatedAt   string `json:"created_at"`
		UpdatedAt   string `json:"updated_at"`
		Links       struct{ Self, Resource string }
	}
	if err := json.Unmarshal(o.body, &v); o.status != http.StatusOK || err != nil {
		t.Fatalf("GET operation: %v (%v)", o, err)
	}
	if v.OperationID != op || v.Operation != OperationCreate || v.State != idem.StateSucceeded ||
		v.Status != http.StatusCreated || v.CreatedAt == "" || v.UpdatedAt == "" || v.Links.Self != "/v1/operations/"+op || v.Links.Resource != "/v1/payments/"+p.ID {
		t.Errorf("operation %s", o.body)
	}
}

func testMemoAbsent(t *testing.T, b *testBundle) {
	r, p := b.mustCreate(t, "tok-alice", "k1", `{"amount": "1", "currency": "EUR", "payee": "p", "memo": null}`)
	if p.Memo != nil || bytes.Contains(r.body, []byte("memo")) {
		t.Errorf("absent memo shown: %s", r.body)
	}
	// null and absent are the same payload: a replay.
	requireReplay(t, r, b.post(t, "tok-alice", "k1", `{"amount": "1.00", "currency": "EUR", "payee": "p"}`))
}

func testReplay(t *testing.T, b *testBundle) {
	const body = `{"amount":"12.50","currency":"EUR","payee":"acct_1","memo":"m"}`
	first, _ := b.mustCreate(t, "tok-alice", "k1", body)
	for name, again := range map[string]string{
		"identical":         body,
		"scale":             `{"amount":"12.5","currency":"EUR","payee":"acct_1","memo":"m"}`,
		"member order":      `{"memo":"m","payee":"acct_1","currency":"EUR","amount":"12.50"}`,
		"white space":       " {\n\t\"amount\" : \"12.50\",  \"currency\":\"EUR\",\r\n\"payee\":\"acct_1\", \"memo\":\"m\" }\n",
		"escaped same text": `{"amount":"12.50","currency":"\u0045UR","payee":"acct\u005f1","memo":"m"}`,
	} {
		t.Run(name, func(t *testing.T) {
			requireReplay(t, first, b.post(t, "tok-alice", "k1", again))
		})
	}
	if n := countPayments(t, b.store); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
}

func testConflict(t *testing.T, b *testBundle) {
	b.mustCreate(t, "tok-alice", "k1", `{"amount":"12.50","currency":"EUR","payee":"acct_1"}`)
	for _, body := range []string{
		`{"amount":"12.51","currency":"EUR","payee":"acct_1"}`,
		`{"amount":"12.50","currency":"USD","payee":"acct_1"}`,
		`{"amount":"12.50","currency":"EUR","payee":"acct_1","memo":""}`,
	} {
		r := b.post(t, "tok-alice", "k1", body)
		requireProblem(t, r, http.StatusUnprocessableEntity, idem.CodePayloadConflict)
		if bytes.Contains(r.body, []byte("12.5")) || bytes.Contains(r.body, []byte("pay_")) {
			t.Errorf("conflict reveals the first request or response: %s", r.body)
		}
	}
	if n := countPayments(t, b.store); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
}

func testRefusedPayloads(t *testing.T, b *testBundle) {
	for _, c := range []struct {
		body string
		code idem.Code
	}{
		{`{"amount":"1.00","amount":"1.00","currency":"EUR","payee":"p"}`, idem.CodeInvalidJSON},
		{`{"amount":"1.00","Amount":"1.00","currency":"EUR","payee":"p"}`, idem.CodeInvalidJSON},
		{`{"amount":"1.00","currency":"EUR","payee":"p"`, idem.CodeInvalidJSON},
		{`{"amount":"1.00","currency":"EUR","payee":"p","extra":1}`, idem.CodeSchemaViolation},
		{`{"amount":"1.00","currency":"EUR"}`, idem.CodeSchemaViolation},
		{`{"amount":1.00,"currency":"EUR","payee":"p"}`, idem.CodeSchemaViolation},
		{`{"amount":"1.005","currency":"EUR","payee":"p"}`, idem.CodeSchemaViolation},
		{`{"amount":"0.00","currency":"EUR","payee":"p"}`, idem.CodeSchemaViolation},
		{`{"amount":"-1","currency":"EUR","payee":"p"}`, idem.CodeSchemaViolation},
		{`{"amount":"1","currency":"eur","payee":"p"}`, idem.CodeSchemaViolation},
		{`{"amount":"1","currency":"EUR","payee":"` + strings.Repeat("x", 65) + `"}`, idem.CodeSchemaViolation},
		{`["amount"]`, idem.CodeSchemaViolation},
	} {
		requireProblem(t, b.post(t, "tok-alice", "k-refused", c.body), http.StatusBadRequest, c.code)
	}
	if n := countPayments(t, b.store); n != 0 {
		t.Errorf("%d payment rows, want 0", n)
	}
}

func testAmountLimit(t *testing.T, b *testBundle) {
	first := b.post(t, "tok-alice", "k1", `{"amount":"1000000.01","currency":"EUR","payee":"p"}`)
	requireProblem(t, first, http.StatusUnprocessableEntity, CodeAmountLimit)
	requireReplay(t, first, b.post(t, "tok-alice", "k1", `{"payee":"p","currency":"EUR","amount":"1000000.01"}`))
	o := b.do(t, http.MethodGet, "/v1/operations/"+first.header.Get("Idempotency-Operation"), "tok-alice", "", "")
	if o.status != http.StatusOK || !strings.Contains(string(o.body), `"state":"REJECTED"`) ||
		!strings.Contains(string(o.body), `"status":422`) {
		t.Errorf("operation of a refused payment: %v", o)
	}
	b.mustCreate(t, "tok-alice", "k2", `{"amount":"1000000","currency":"EUR","payee":"p"}`)
	if n := countPayments(t, b.store); n != 1 {
		t.Errorf("%d payment rows, want 1 (the refusal writes none)", n)
	}
}

func testUnauthenticated(t *testing.T, b *testBundle) {
	_, p := b.mustCreate(t, "tok-alice", "k1", `{"amount":"1","currency":"EUR","payee":"p"}`)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/payments", `{"amount":"1","currency":"EUR","payee":"p"}`},
		{http.MethodGet, "/v1/payments", ""},
		{http.MethodGet, "/v1/payments/" + p.ID, ""},
		{http.MethodGet, "/v1/operations/op_x", ""},
	} {
		for _, token := range []string{"", "nope"} {
			resp := b.do(t, c.method, c.path, token, "k1", c.body)
			requireProblem(t, resp, http.StatusUnauthorized, idem.CodeUnauthenticated)
			if got := resp.header.Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("%s %s with token %q: WWW-Authenticate %q, want Bearer", c.method, c.path, token, got)
			}
		}
	}
	// A scheme other than Bearer does not authenticate.
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/v1/payments", nil)
	req.Header.Set("Authorization", "Basic tok-alice")
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic auth: %d", resp.StatusCode)
	}
}

func testOwnership(t *testing.T, b *testBundle) {
	const body = `{"amount":"5","currency":"EUR","payee":"p"}`
	ra, pa := b.mustCreate(t, "tok-alice", "same-key", body)
	opA := ra.header.Get("Idempotency-Operation")
	// The same key of another principal, or of the same principal name
	// in another tenant, is another scope: a new operation, not a replay.
	for _, tok := range []string{"tok-bob", "tok-eve"} {
		r, p := b.mustCreate(t, tok, "same-key", body)
		if r.header.Get("Idempotency-Operation") == opA || p.ID == pa.ID {
			t.Errorf("%s hit alice's operation", tok)
		}
		requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/"+pa.ID, tok, "", ""), http.StatusNotFound, CodeNotFound)
		requireProblem(t, b.do(t, http.MethodGet, "/v1/operations/"+opA, tok, "", ""), http.StatusNotFound, CodeNotFound)
	}
	requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/pay_nope", "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/operations/op_nope", "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
}

func testList(t *testing.T, b *testBundle) {
	_, p1 := b.mustCreate(t, "tok-alice", "k1", `{"amount":"1","currency":"EUR","payee":"p"}`)
	_, p2 := b.mustCreate(t, "tok-alice", "k2", `{"amount":"2","currency":"EUR","payee":"p","memo":"second"}`)
	_, pb := b.mustCreate(t, "tok-bob", "k1", `{"amount":"3","currency":"EUR","payee":"p"}`)
	list := func(tok string) []Payment {
		t.Helper()
		r := b.do(t, http.MethodGet, "/v1/payments", tok, "", "")
		var l struct{ Payments []Payment }
		if err := json.Unmarshal(r.body, &l); r.status != http.StatusOK || err != nil || l.Payments == nil {
			t.Fatalf("list: %v (%v)", r, err)
		}
		return l.Payments
	}
	got := list("tok-alice")
	if len(got) != 2 || got[0].ID != p2.ID || got[1].ID != p1.ID || *got[0].Memo != "second" || got[1].Memo != nil {
		t.Errorf("alice's list %+v, want [%s %s]", got, p2.ID, p1.ID)
	}
	if got := list("tok-bob"); len(got) != 1 || got[0] != pb {
		t.Errorf("bob's list %+v, want [%+v]", got, pb)
	}
	if got := list("tok-eve"); len(got) != 0 {
		t.Errorf("eve's list %+v, want none", got)
	}
}

func testHealthAndMetrics(t *testing.T, b *testBundle) {
	b.mustCreate(t, "tok-alice", "k1", `{"amount":"1","currency":"EUR","payee":"p"}`)
	if r := b.do(t, http.MethodGet, "/healthz", "", "", ""); r.status != http.StatusOK || string(r.body) != `{"status":"ok"}` {
		t.Errorf("healthz: %v", r)
	}
	// The metrics are in Config.Registry, never on the API's routes.
	requireProblem(t, b.do(t, http.MethodGet, "/metrics", "", "", ""), http.StatusNotFound, CodeNotFound)
	families, err := b.reg.Gather()
	found := false
	for _, f := range families {
		found = found || f.GetName() == "idem_requests_total"
	}
	if err != nil || !found {
		t.Errorf("Config.Registry has no idem_requests_total: %v", err)
	}
	b.store.Close()
	requireProblem(t, b.do(t, http.MethodGet, "/healthz", "", "", ""), http.StatusServiceUnavailable, idem.CodeStoreUnavailable)
}

// testExactMatch: ids, tenants and principals match byte for byte on
// every engine — a payment id with a trailing space or in another case
// names nothing, and a principal or tenant that differs from alice's
// only by a trailing space or by case sees none of her payments. (MySQL's
// character collations ignore trailing spaces, and most fold case: the
// service's MySQL tables use binary keys, create_payments_mysql.)
func testExactMatch(t *testing.T, b *testBundle) {
	_, p := b.mustCreate(t, "tok-alice", "k1", `{"amount":"5","currency":"EUR","payee":"p"}`)
	for _, id := range []string{p.ID + "%20", strings.ToLower(p.ID), strings.ToUpper(p.ID)} {
		requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/"+id, "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
		requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/"+id+"/refunds", "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
	}
	for _, tok := range []string{"tok-alice-pad", "tok-alice-case"} {
		requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/"+p.ID, tok, "", ""), http.StatusNotFound, CodeNotFound)
		requireProblem(t, b.refundPost(t, tok, "k-refund", p.ID, `{"amount":"1"}`), http.StatusNotFound, CodeNotFound)
		r := b.do(t, http.MethodGet, "/v1/payments", tok, "", "")
		var l struct{ Payments []Payment }
		if err := json.Unmarshal(r.body, &l); r.status != http.StatusOK || err != nil || len(l.Payments) != 0 {
			t.Errorf("%s lists %v (%v), want no payment", tok, r, err)
		}
	}
	if r := b.do(t, http.MethodGet, "/v1/payments/"+p.ID, "tok-alice", "", ""); r.status != http.StatusOK {
		t.Errorf("alice's own payment: %v", r)
	}
}
