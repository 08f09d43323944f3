package e2e

import (
	"net/http"
	"sync"
	"testing"
)

// TestFaultPrincipal (V1: changed principal; SPEC A7, C2): the same key
// used at once by alice, by bob of the same tenant (with another body)
// and by an "alice" of another tenant (with alice's body) gives three
// separate operations — each principal gets its own outcome, never
// another's, and conflicts only with its own first request. A principal
// cannot read another's payment or operation.
// Proves threat:another-principal-outcome (docs/threat-model.md).
func TestFaultPrincipal(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		s := f.serve("A", nil, true, "--auth", authFile(t))
		key := f.key("principal")
		bodyA := `{"amount":"` + f.amount() + `","currency":"EUR","payee":"acct_1"}`
		bodyB := `{"amount":"` + f.amount() + `","currency":"EUR","payee":"acct_9"}`
		who := []struct{ token, body string }{{"tok-a-Zr4kW9pQ2mX7vT1nB8yL", bodyA}, {"tok-b-Hd3sF6gJ0aK9wE2rU7iO", bodyB}, {"tok-c-Mq5nX1cV8bN3zP6tY0uE", bodyA}}

		n := pick(10, 40)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n * len(who) {
			w := who[f.rng.IntN(len(who))]
			if i < len(who) {
				w = who[i] // every principal at least once
			}
			wg.Go(func() {
				<-start
				f.post(s, "/v1/payments", w.token, key, w.body)
			})
		}
		close(start)
		wg.Wait()

		ops := map[string]string{}
		for _, w := range who {
			r := f.postUntil(s, "/v1/payments", w.token, key, w.body, func(r reply) bool { return r.status == http.StatusCreated })
			ops[w.token] = r.header.Get("Idempotency-Operation")
		}
		wantProblem(t, "bob with alice's body", f.mustPost(s, "/v1/payments", "tok-b-Hd3sF6gJ0aK9wE2rU7iO", key, bodyA), http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		wantProblem(t, "alice with bob's body", f.mustPost(s, "/v1/payments", "tok-a-Zr4kW9pQ2mX7vT1nB8yL", key, bodyB), http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		for _, w := range who {
			for _, other := range who {
				if other.token == w.token {
					continue
				}
				r, err := f.do(s, http.MethodGet, "/v1/operations/"+ops[other.token], w.token, nil, "")
				if err != nil {
					t.Fatal(err)
				}
				wantProblem(t, w.token+" reads "+other.token+"'s operation", r, http.StatusNotFound, "NOT_FOUND")
			}
		}
		// Unavailable: a loaded machine may fail some of the concurrent
		// requests closed; the retries above settle them.
		if counts := f.check(allow{Unavailable: true}); counts["executed"] != len(who) {
			t.Errorf("answers %v; want exactly %d executions, one per principal", counts, len(who))
		}
	})
}
