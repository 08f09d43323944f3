package payments

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestUnstorableBytes: a NUL in any free-text member of a request body
// (payee and memo of a payment or a transfer, reason of a refund) is
// refused with 400 SCHEMA_VIOLATION and records nothing, and an
// identifier in a path that no row can hold (NUL, invalid UTF-8) is 404
// NOT_FOUND — on SQLite and PostgreSQL alike. PostgreSQL's text columns
// cannot hold either, so without the schemas' Text pattern and the
// handlers' storable check the PostgreSQL run fails with 503
// STORE_UNAVAILABLE (the handler's failed insert) where SQLite answers
// 201. threat:nul-byte-5xx
func TestUnstorableBytes(t *testing.T) {
	t.Parallel()
	pgtest.EachDriver(t, "bytes.db", func(t *testing.T, driver, dsn string) {
		b := newTrBench(t, dsn, 5*time.Second, true)
		_, p := b.mustCreate(t, "tok-alice", "base", `{"amount":"10.00","currency":"EUR","payee":"acct"}`)
		for _, c := range []struct{ name, path, body string }{
			{"payee", "/v1/payments", `{"amount":"1.00","currency":"EUR","payee":"a\u0000b"}`},
			{"payee only NUL", "/v1/payments", `{"amount":"1.00","currency":"EUR","payee":"\u0000"}`},
			{"memo", "/v1/payments", `{"amount":"1.00","currency":"EUR","payee":"a","memo":"x\u0000"}`},
			{"transfer payee", "/v1/transfers", `{"amount":"1.00","currency":"EUR","payee":"a\u0000b"}`},
			{"transfer memo", "/v1/transfers", `{"amount":"1.00","currency":"EUR","payee":"a","memo":"\u0000"}`},
			{"refund reason", "/v1/payments/" + p.ID + "/refunds", `{"amount":"1.00","reason":"r\u0000"}`},
		} {
			for try := range 2 { // the same answer on a retry: nothing was recorded
				r := b.do(t, http.MethodPost, c.path, "tok-alice", "nul-"+c.name, c.body)
				if r.status != http.StatusBadRequest || r.code() != idem.CodeSchemaViolation {
					t.Errorf("%s, try %d: %v, want 400 SCHEMA_VIOLATION", c.name, try, r)
				}
			}
		}
		if n := countPayments(t, b.store); n != 1 {
			t.Errorf("%d payments, want the first one only", n)
		}
		if n := b.prov.Executed(); n != 0 {
			t.Errorf("the provider executed %d transfers", n)
		}
		// The same characters where they are allowed are stored and
		// read back.
		b.mustCreate(t, "tok-alice", "ctl", `{"amount":"1.00","currency":"EUR","payee":"a\u0001\u007f\u2028b","memo":"\n"}`)

		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/payments/pay_%00", ""},
			{http.MethodGet, "/v1/payments/pay_%ff", ""},
			{http.MethodGet, "/v1/payments/pay_%00/refunds", ""},
			{http.MethodGet, "/v1/payments/" + p.ID + "/refunds/ref_%00", ""},
			{http.MethodGet, "/v1/transfers/tr_%00", ""},
			{http.MethodGet, "/v1/transfers/tr_%c3%28", ""},
			{http.MethodGet, "/v1/operations/op_%00", ""},
			{http.MethodPost, "/v1/payments/pay_%00/refunds", `{"amount":"1.00"}`},
			{http.MethodPost, "/v1/payments/pay_%fe/refunds", `{"amount":"1.00"}`},
		} {
			for try := range 2 {
				key := ""
				if c.method == http.MethodPost {
					key = "path-" + c.path
				}
				r := b.do(t, c.method, c.path, "tok-alice", key, c.body)
				if r.status != http.StatusNotFound || r.code() != CodeNotFound {
					t.Errorf("%s %s, try %d: %v, want 404 NOT_FOUND", c.method, c.path, try, r)
				}
			}
		}
	})
}
