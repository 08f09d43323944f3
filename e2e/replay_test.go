package e2e

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/internal/keygen"
)

const payBody = `{"amount":"12.50","currency":"EUR","payee":"acct_1","memo":"x"}`

// TestReplay: a retry with the same key and an equivalent body — the
// same bytes, "12.5" for "12.50", members reordered, other white space,
// the key as an sf-string — replays the first response byte for byte.
func TestReplay(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		first := s.post(t, "demo", "k-replay-1", payBody)
		op := wantCreated(t, "first POST", first)
		if key := keygen.ForLabel("k-replay-1"); op == key || strings.Contains(first.header.Get("Location"), key) {
			t.Errorf("the client's key is used as an ID: operation %s, Location %s", op, first.header.Get("Location"))
		}
		p := payment(t, "first POST", first.body)
		want := map[string]any{"id": p["id"], "amount": "12.50", "currency": "EUR", "payee": "acct_1", "memo": "x", "created_at": p["created_at"]}
		id, _ := p["id"].(string)
		created, _ := p["created_at"].(string)
		if _, err := time.Parse(time.RFC3339Nano, created); err != nil || id == "" || !reflect.DeepEqual(p, want) {
			t.Errorf("payment %s; want id, amount 12.50, currency, payee, memo and an RFC 3339 created_at", first.body)
		}
		if loc := first.header.Get("Location"); loc != "/v1/payments/"+id {
			t.Errorf("Location %q, want /v1/payments/%s", loc, id)
		}
		if mt := first.header.Get("Content-Type"); !strings.HasPrefix(mt, "application/json") {
			t.Errorf("Content-Type %q, want application/json", mt)
		}

		for _, c := range []struct{ name, key, body string }{
			{"same bytes", "k-replay-1", payBody},
			{"12.5 for 12.50", "k-replay-1", `{"amount":"12.5","currency":"EUR","payee":"acct_1","memo":"x"}`},
			{"members reordered", "k-replay-1", `{"memo":"x","payee":"acct_1","currency":"EUR","amount":"12.50"}`},
			{"white space", "k-replay-1", "\n {\t\"amount\" : \"12.50\" ,\r\n \"currency\":\"EUR\",  \"payee\" :\"acct_1\", \"memo\":\"x\" }\n"},
			{"key as sf-string", `"k-replay-1"`, payBody},
		} {
			wantReplay(t, c.name, first, s.post(t, "demo", c.key, c.body))
		}

		// The resource exists once, as created.
		g := s.get(t, "demo", first.header.Get("Location"))
		if g.status != http.StatusOK || !reflect.DeepEqual(payment(t, "GET payment", g.body), p) {
			t.Errorf("GET %s: %v; want 200 with %s", first.header.Get("Location"), g, first.body)
		}
		if c := countRows(t, dsn, op); c != (counts{1, 1, 1, 1}) {
			t.Errorf("rows after one execution and five replays: %+v; want one payment and one outbox row", c)
		}
	})
}

// TestRefusals: a different payload under a used key conflicts without
// revealing the first request; malformed requests are refused before the
// acceptance point and leave nothing behind.
func TestRefusals(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		first := s.post(t, "demo", "k-ref", payBody)
		op := wantCreated(t, "first POST", first)
		pay, _ := payment(t, "first POST", first.body)["id"].(string)

		conflicts := []struct {
			name string
			r    reply
		}{
			{"amount 13.00", s.post(t, "demo", "k-ref", `{"amount":"13.00","currency":"EUR","payee":"acct_1","memo":"x"}`)},
			{"memo absent", s.post(t, "demo", "k-ref", `{"amount":"12.50","currency":"EUR","payee":"acct_1"}`)},
			{"media type application/vnd.idem+json", s.post(t, "demo", "k-ref", payBody, "Content-Type", "application/vnd.idem+json")},
		}
		for _, c := range conflicts {
			wantProblem(t, c.name, c.r, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
			if strings.Contains(string(c.r.body), op) || strings.Contains(string(c.r.body), pay) ||
				c.r.header.Get("Idempotency-Operation") != "" || c.r.header.Get("Location") != "" {
				t.Errorf("%s: the conflict reveals the first request's outcome: %v %v", c.name, c.r, c.r.header)
			}
		}

		big := `{"amount":"1.00","currency":"EUR","payee":"acct_1","memo":"` + strings.Repeat("m", 1<<20) + `"}`
		for _, c := range []struct {
			name, token, key, body string
			kv                     []string
			status                 int
			code                   string
		}{
			{"duplicate members", "demo", "k-bad-1", `{"amount":"1.00","amount":"2.00","currency":"EUR","payee":"acct_1"}`, nil, 400, "INVALID_JSON"},
			{"unknown member", "demo", "k-bad-2", `{"amount":"1.00","currency":"EUR","payee":"acct_1","fee":"1"}`, nil, 400, "SCHEMA_VIOLATION"},
			{"text/plain", "demo", "k-bad-3", payBody, []string{"Content-Type", "text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"},
			{"missing key", "demo", "", payBody, nil, 400, "KEY_MISSING"},
			{"two key lines", "demo", "k-bad-4", payBody, []string{"Idempotency-Key", "k-bad-5"}, 400, "KEY_MULTIPLE"},
			{"key of 129 characters", "demo", "raw:" + strings.Repeat("k", 129), payBody, nil, 400, "KEY_INVALID"},
			{"low-entropy key", "demo", "raw:" + strings.Repeat("k", 20), payBody, nil, 400, "KEY_INVALID"},
			{"card number as key", "demo", "raw:4111111111111111", payBody, nil, 400, "KEY_INVALID"},
			{"body over 1 MiB", "demo", "k-bad-6", big, nil, 413, "BODY_TOO_LARGE"},
			{"memo one character over its bound", "demo", "k-bad-9", `{"amount":"1.00","currency":"EUR","payee":"acct_1","memo":"` +
				strings.Repeat("m", payments.MaxMemo+1) + `"}`, nil, 400, "SCHEMA_VIOLATION"},
			{"no token", "", "k-bad-7", payBody, nil, 401, "UNAUTHENTICATED"},
			{"unknown token", "nobody", "k-bad-8", payBody, nil, 401, "UNAUTHENTICATED"},
		} {
			wantProblem(t, c.name, s.post(t, c.token, c.key, c.body, c.kv...), c.status, c.code)
		}
		// Refused requests reserved nothing: their keys are still free.
		for _, key := range []string{"k-bad-1", "k-bad-2", "k-bad-3", "k-bad-7"} {
			wantCreated(t, "valid POST with the key of a refused request "+key, s.post(t, "demo", key, payBody))
		}
		// The conflicts changed nothing either.
		wantReplay(t, "retry after the conflicts", first, s.post(t, "demo", "k-ref", payBody))
		if c := countRows(t, dsn, op); c.Payments != 1 || c.Outbox != 1 || c.AllPayments != 5 || c.AllOutbox != 5 {
			t.Errorf("rows %+v; want one payment and one outbox row for the first operation, five of each in all", c)
		}
	})
}

// TestAmountLimit: an amount above 1000000.00 is a deterministic refusal,
// stored as REJECTED (refused, nothing changed), replayed, and writes
// nothing.
func TestAmountLimit(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		body := `{"amount":"1000000.01","currency":"EUR","payee":"acct_1"}`
		first := s.post(t, "demo", "k-limit", body)
		wantProblem(t, "amount 1000000.01", first, http.StatusUnprocessableEntity, "AMOUNT_LIMIT")
		op := first.header.Get("Idempotency-Operation")
		if op == "" || first.header.Get("Idempotency-Contract") != contract || first.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("AMOUNT_LIMIT headers %v; want Idempotency-Contract, Idempotency-Operation, no Idempotent-Replayed", first.header)
		}
		wantReplay(t, "retry of the refused payment", first, s.post(t, "demo", "k-limit", body))
		wantReplay(t, "retry with members reordered", first, s.post(t, "demo", "k-limit", `{"payee":"acct_1","currency":"EUR","amount":"1000000.01"}`))
		wantProblem(t, "same key, amount 1000000.00", s.post(t, "demo", "k-limit", `{"amount":"1000000.00","currency":"EUR","payee":"acct_1"}`),
			http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")

		var v struct{ State string }
		o := s.get(t, "demo", "/v1/operations/"+op)
		if err := json.Unmarshal(o.body, &v); o.status != http.StatusOK || err != nil || v.State != "REJECTED" {
			t.Errorf("GET /v1/operations/%s: %v; want state REJECTED", op, o)
		}
		if c := countRows(t, dsn, op); c != (counts{}) {
			t.Errorf("rows after AMOUNT_LIMIT: %+v; want none", c)
		}
		// The limit itself is allowed.
		okOp := wantCreated(t, "amount 1000000.00", s.post(t, "demo", "k-limit-ok", `{"amount":"1000000.00","currency":"EUR","payee":"acct_1"}`))
		if c := countRows(t, dsn, okOp); c != (counts{1, 1, 1, 1}) {
			t.Errorf("rows after a payment at the limit: %+v; want one of each", c)
		}
	})
}
