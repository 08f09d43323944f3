package e2e

import (
	"net/http"
	"testing"
)

// TestFaultRevision (V1: replay across API revisions; SPEC C2).
//
// A payment accepted by one server is replayed byte for byte by a
// server restarted on the same database. A server running another API
// major revision (idem serve --api-revision v2, which binds the revision
// into every scope and changes nothing else) never hits the first
// revision's record: the same key and body execute anew there, a
// different body conflicts only with v2's own operation, and both
// revisions keep replaying their own outcome — also while both servers
// run at once.
// Proves threat:another-principal-outcome (docs/threat-model.md).
func TestFaultRevision(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		key, body := f.key("rev"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`
		other := `{"amount":"` + f.amount() + `","currency":"USD","payee":"acct_2"}`

		a := f.serve("A", nil, false)
		v1 := wantCreated(t, "v1 first POST", f.mustPost(a, "/v1/payments", "demo", key, body))
		terminate(t, a)

		b := f.serve("B", nil, true) // v1 again, restarted
		f.mustPost(b, "/v1/payments", "demo", key, body)
		c := f.serve("C", nil, true, "--api-revision", "v2")
		v2 := wantCreated(t, "v2 POST with the key and body of v1's operation", f.mustPost(c, "/v1/payments", "demo", key, body))
		if v2 == v1 {
			t.Fatalf("v2 answered with v1's operation %s", v1)
		}
		wantProblem(t, "v2 POST with another body", f.mustPost(c, "/v1/payments", "demo", key, other), http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		for range pick(2, 10) {
			f.mustPost(b, "/v1/payments", "demo", key, body)
			f.mustPost(c, "/v1/payments", "demo", key, body)
		}
		wantProblem(t, "v1 POST with another body", f.mustPost(b, "/v1/payments", "demo", key, other), http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		if counts := f.check(allow{}); counts["executed"] != 2 {
			t.Errorf("answers %v; want exactly two executions, one per revision", counts)
		}
	})
}
