package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestFaultJSON (V1: JSON member order change, duplicate members).
//
// Schema mode: the same payload with its members in random orders, with
// other white space and with the amount at another lexical scale ("7.5"
// for "7.50") replays the first outcome byte for byte. Duplicate member
// names — exact, or differing only in case — are refused with 400
// INVALID_JSON before the acceptance point: under a fresh key they reserve
// nothing (the key then executes normally) and under a used key they
// neither replay nor conflict.
func TestFaultJSON(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		s := f.serve("A", nil, true)
		key, amount := f.key("json"), f.amount()
		members := []string{`"amount":"` + amount + `"`, `"currency":"EUR"`, `"payee":"acct_1"`, `"memo":"m"`}
		wantCreated(t, "first POST", f.mustPost(s, "/v1/payments", "demo", key, "{"+strings.Join(members, ",")+"}"))
		spaces := []string{"", " ", "\n", "\t", " \r\n "}
		for range pick(10, 50) {
			perm := f.rng.Perm(len(members))
			var b strings.Builder
			b.WriteString(spaces[f.rng.IntN(len(spaces))] + "{")
			for i, p := range perm {
				if i > 0 {
					b.WriteString(spaces[f.rng.IntN(len(spaces))] + ",")
				}
				b.WriteString(spaces[f.rng.IntN(len(spaces))] + members[p])
			}
			b.WriteString("}" + spaces[f.rng.IntN(len(spaces))])
			f.mustPost(s, "/v1/payments", "demo", key, b.String())
		}
		if strings.HasSuffix(amount, "0") {
			f.mustPost(s, "/v1/payments", "demo", key, `{"memo":"m","payee":"acct_1","currency":"EUR","amount":"`+strings.TrimSuffix(amount, "0")+`"}`)
		}

		dups := []string{
			`{"amount":"1.00","amount":"2.00","currency":"EUR","payee":"acct_1"}`,
			`{"amount":"1.00","currency":"EUR","payee":"acct_1","payee":"acct_1"}`,
			`{"amount":"1.00","AMOUNT":"1.00","currency":"EUR","payee":"acct_1"}`,
			`{"amount":"1.00","currency":"EUR","Currency":"EUR","payee":"acct_1"}`,
		}
		fresh := f.key("json-dup")
		for _, d := range dups {
			wantProblem(t, "duplicate members under a fresh key", f.mustPost(s, "/v1/payments", "demo", fresh, d), http.StatusBadRequest, "INVALID_JSON")
			wantProblem(t, "duplicate members under a used key", f.mustPost(s, "/v1/payments", "demo", key, d), http.StatusBadRequest, "INVALID_JSON")
		}
		if n := len(f.takeSnapshot().Operations); n != 1 {
			t.Errorf("%d records after the refused duplicates; want only the first operation's", n)
		}
		wantCreated(t, "a valid POST with the key of the refused ones", f.mustPost(s, "/v1/payments", "demo", fresh, `{"amount":"1.00","currency":"EUR","payee":"acct_1"}`))
		if counts := f.check(allow{}); counts["executed"] != 2 || counts["refused INVALID_JSON"] != 2*len(dups) {
			t.Errorf("answers %v; want 2 executions and %d refusals", counts, 2*len(dups))
		}
	})
}
