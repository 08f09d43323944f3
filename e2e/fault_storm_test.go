package e2e

import (
	"net/http"
	"sync"
	"testing"
)

// TestFaultStorm (V1: concurrency): 100 concurrent requests with one key
// and one payload — in equivalent byte forms (members reordered) — plus
// one with another amount, all at once. Exactly one executes; every
// other request with its payload gets the same outcome byte for byte or
// 409 IN_PROGRESS; the different one (or, if it won, all the others) gets
// 422 PAYLOAD_CONFLICT, and so do the sequential retries afterwards; the database holds one payment and one outbox
// row. Any request may also fail closed (503 STORE_UNAVAILABLE) on an
// overloaded machine; sequential retries then settle it. The long form
// repeats it with more keys.
// Proves threat:concurrent-duplicates (docs/threat-model.md).
func TestFaultStorm(t *testing.T) {
	eachEngine(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		s := f.serve("A", nil, true)
		for round := range pick(1, 5) {
			key := f.key("storm")
			forms, bodies, odd := f.stormBodies()

			start := make(chan struct{})
			var wg sync.WaitGroup
			for _, body := range bodies {
				wg.Go(func() {
					<-start
					f.post(s, "/v1/payments", "demo", key, body)
				})
			}
			close(start)
			wg.Wait()
			// Sequential retries after the storm: whichever payload won
			// gets the outcome, the other a conflict — also when the
			// storm's own answers were 503 (a loaded database fails
			// closed). The odd one wins about one storm in 101.
			settled := func(r reply) bool {
				return r.status == http.StatusCreated || problemErr(r, http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT") == ""
			}
			main := f.postUntil(s, "/v1/payments", "demo", key, forms[f.rng.IntN(len(forms))], settled)
			oddR := f.postUntil(s, "/v1/payments", "demo", key, bodies[odd], settled)
			if (main.status == http.StatusCreated) == (oddR.status == http.StatusCreated) {
				t.Errorf("round %d: after the storm the payload answered %d and the odd one %d; want exactly one 201", round, main.status, oddR.status)
			}
			t.Logf("round %d: key %s, the odd request was #%d of the storm", round, key, odd)
		}
		// A request may fail closed (503) when the machine is too loaded
		// for the store to answer within --store-timeout; the invariants
		// hold all the same.
		counts := f.check(allow{Unavailable: true})
		if counts["executed"] != pick(1, 5) {
			t.Errorf("%d executions; want exactly one per storm", counts["executed"])
		}
		if counts["conflict"] < pick(1, 5) {
			t.Errorf("%d conflicts; want at least one per storm (the odd payload)", counts["conflict"])
		}
	})
}

// stormBodies returns a storm's 101 request bodies: 100 with one payment
// in equivalent byte forms (members reordered, white space) and, at
// position odd, one with another amount; forms are the equivalent forms.
func (f *faultRun) stormBodies() (forms, bodies []string, odd int) {
	amount, memo := f.amount(), f.key("memo")
	forms = []string{
		`{"amount":"` + amount + `","currency":"EUR","payee":"acct_1","memo":"` + memo + `"}`,
		`{"memo":"` + memo + `","payee":"acct_1","currency":"EUR","amount":"` + amount + `"}`,
		` { "currency" : "EUR", "amount":"` + amount + `", "memo":"` + memo + `","payee":"acct_1"}`,
	}
	bodies = make([]string, 101)
	for i := range 100 {
		bodies[i] = forms[f.rng.IntN(len(forms))]
	}
	other := f.amount()
	for other == amount {
		other = f.amount()
	}
	odd = f.rng.IntN(len(bodies))
	bodies[100], bodies[odd] = bodies[odd], `{"amount":"`+other+`","currency":"EUR","payee":"acct_1","memo":"`+memo+`"}`
	return forms, bodies, odd
}
