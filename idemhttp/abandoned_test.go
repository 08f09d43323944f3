package idemhttp_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// TestWaitEndsWhenAbandonedRetires: a request waiting (Prefer: wait=10) on
// a reservation that another process took and never finished gets 409
// KEY_RETIRED naming the operation as soon as Prune retires the
// reservation (its lease expired, then its retention), not at the end of
// its wait, and nothing is executed. threat:abandoned-reservation-lockout
func TestWaitEndsWhenAbandonedRetires(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		ctx := t.Context()
		f := newFixture(t, store, idemhttp.Enforce)
		// The reservation of the process that crashed: the same scope and
		// fingerprint as the request below.
		prep := &idemhttp.Middleware{Operation: idemhttp.Operation{Name: "things.create", APIRevision: "v1"}}
		req := httptest.NewRequest("POST", "/things", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.KeyHeader, "abandoned")
		id := idem.Identity{Tenant: "t", Principal: "alice"}
		p, err := prep.Prepare(req, id, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		const lease = 2 * time.Second
		rec, created, err := store.Reserve(ctx, registry.Claim{Scope: p.Scope, Fingerprint: p.Fingerprint, Operation: "things.create",
			Owner: registry.OwnerOf(id), Lease: lease, Retention: time.Millisecond})
		if err != nil || !created {
			t.Fatalf("Reserve: created %v, %v", created, err)
		}
		start := time.Now()
		answered := make(chan result, 1)
		go func() { answered <- f.post("abandoned", `{}`, "Prefer", "wait=10") }()

		deadline := time.Now().Add(30 * time.Second)
		for {
			res, err := store.Prune(ctx, 10)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			if res.Retired == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the abandoned reservation was not retired within 30 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		retiredAfter := time.Since(start)
		r := <-answered
		elapsed := time.Since(start)
		checkRetired(t, "the waiting request", r, rec.OperationID)
		if elapsed >= retiredAfter+5*time.Second {
			t.Errorf("answered %v after the start, %v after the retirement: it waited out its wait instead", elapsed, elapsed-retiredAfter)
		}
		if n := f.app.calls.Load(); n != 0 {
			t.Errorf("the handler ran %d times; want never", n)
		}
		t.Logf("retired after %v, answered after %v", retiredAfter.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	})
}
