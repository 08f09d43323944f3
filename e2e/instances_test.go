package e2e

import (
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestTwoInstances: two servers on one PostgreSQL database share the
// registry: one replays the other's outcome, a race spread over both
// executes once, and Prefer: wait on either sees an outcome committed
// elsewhere. The exchanges before the wait go into a recorded history
// checked like the fault suite's.
func TestTwoInstances(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.DSN(t)
		f := newFault(t, dsn)
		a, b := f.serve("A", nil, true), f.serve("B", nil, true)
		const path = "/v1/payments"

		key := f.key("two")
		first := f.mustPost(a, path, "demo", key, payBody)
		wantCreated(t, "POST to A", first)
		wantReplay(t, "same POST to B", first, f.mustPost(b, path, "demo", key, payBody))
		wantReplay(t, "equivalent POST to B", first, f.mustPost(b, path, "demo", key, `{"memo":"x","payee":"acct_1","currency":"EUR","amount":"12.5"}`))
		wantProblem(t, "other amount to B", f.mustPost(b, path, "demo", key, `{"amount":"1.00","currency":"EUR","payee":"acct_1","memo":"x"}`),
			http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		if g := b.get(t, "demo", first.header.Get("Location")); g.status != http.StatusOK {
			t.Errorf("GET A's payment from B: %v", g)
		}

		raceKey, raceBody := f.key("two-race"), `{"amount":"7.00","currency":"EUR","payee":"acct_2"}`
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 50 {
			s := []*server{a, b}[i%2]
			wg.Go(func() {
				<-start
				f.post(s, path, "demo", raceKey, raceBody)
			})
		}
		close(start)
		wg.Wait()
		f.postUntil(a, path, "demo", raceKey, raceBody, func(r reply) bool { return r.status == http.StatusCreated })
		f.postUntil(b, path, "demo", raceKey, raceBody, func(r reply) bool { return r.status == http.StatusCreated })
		if counts := f.check(allow{Unavailable: true}); counts["executed"] != 2 {
			t.Errorf("answers %v; want exactly two executions (one per key) over both instances", counts)
		}

		testWait(t, dsn, []*server{a, b}, f.key("two-wait"))
	})
}
