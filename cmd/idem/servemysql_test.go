package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/keygen"
	"github.com/idemkit/idem/internal/mytest"
)

// TestServeMySQL: "idem serve --db mysql://…" serves the reference
// service on MariaDB — a payment, its replay, a refund and a transfer
// through the provider, each answered 201 and replayed byte for byte —
// and "idem migrate", "idem ops list" and "idem recover" accept the same
// DSN.
func TestServeMySQL(t *testing.T) {
	t.Parallel()
	dsn := mytest.URL(t)
	if code, out, stderr := runCmd(t, "", "migrate", "--db", dsn); code != exitOK || !strings.Contains(out, "mysql") {
		t.Fatalf("migrate: %d %q %s", code, out, stderr)
	}
	prov := startProvider(t)
	s := startServe(t, "--db", dsn, "--provider", prov.url)

	const body = `{"amount":"12.5","currency":"EUR","payee":"acct_1"}`
	first, firstBody := s.post(t, "demo", "key-1", body)
	if first.StatusCode != http.StatusCreated || !strings.HasPrefix(first.Header.Get("Location"), "/v1/payments/pay_") {
		t.Fatalf("create: %d %v %s", first.StatusCode, first.Header, firstBody)
	}
	again, againBody := s.post(t, "demo", "key-1", body)
	if again.StatusCode != http.StatusCreated || !bytes.Equal(againBody, firstBody) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s, first %s", again.StatusCode, again.Header, againBody, firstBody)
	}
	location := first.Header.Get("Location")
	send := func(path, key, body string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer demo")
		req.Header.Set("Idempotency-Key", keygen.ForLabel(key))
		req.Header.Set("Content-Type", "application/json")
		return do(t, req)
	}
	for _, c := range []struct{ path, body, location string }{
		{location + "/refunds", `{"amount":"2.5"}`, location + "/refunds/ref_"},
		{"/v1/transfers", `{"amount":"3","currency":"EUR","payee":"acct_2"}`, "/v1/transfers/"},
	} {
		resp, b := send(c.path, "key-"+c.path, c.body)
		if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(resp.Header.Get("Location"), c.location) {
			t.Fatalf("POST %s: %d %v %s", c.path, resp.StatusCode, resp.Header, b)
		}
		replay, rb := send(c.path, "key-"+c.path, c.body)
		if replay.StatusCode != http.StatusCreated || !bytes.Equal(rb, b) || replay.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("POST %s again: %d %v %s, first %s", c.path, replay.StatusCode, replay.Header, rb, b)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+location+"/refunds", nil)
	req.Header.Set("Authorization", "Bearer demo")
	resp, b := do(t, req)
	var refunds struct {
		Refunded string            `json:"refunded"`
		Refunds  []json.RawMessage `json:"refunds"`
	}
	if err := json.Unmarshal(b, &refunds); resp.StatusCode != http.StatusOK || err != nil || len(refunds.Refunds) != 1 {
		t.Errorf("GET refunds: %d %s (%v), want one refund", resp.StatusCode, b, err)
	}
	s.stop(t)

	code, out, stderr := runCmd(t, "", "ops", "list", "--db", dsn, "--json")
	if code != exitOK {
		t.Fatalf("ops list: %d %s", code, stderr)
	}
	for _, op := range []string{"payments.create", "payments.refund", "transfers.create"} {
		if !strings.Contains(out, op) {
			t.Errorf("ops list lacks %s:\n%s", op, out)
		}
	}
	if code, out, stderr := runCmd(t, "", "recover", "--db", dsn, "--provider", prov.url, "--once", "--json"); code != exitOK ||
		strings.TrimSpace(out) != `{"recovered":0,"unknown":0,"reconciled":0,"unsettled":0}` {
		t.Errorf("recover: %d %q %s", code, out, stderr)
	}
}
