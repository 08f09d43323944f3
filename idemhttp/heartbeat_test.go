package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// idle is a Downstream that no handler calls: every answer is indefinite.
type idle struct{}

func (idle) Send(context.Context, string, []byte) effect.Answer {
	return effect.Answer{Detail: "the idle downstream was called"}
}

func (idle) Lookup(context.Context, string) effect.Answer {
	return effect.Answer{Detail: "the idle downstream was called"}
}

// idleEffects declares an effect-bearing operation whose handler calls no
// effect: it runs without a business transaction.
func idleEffects() *effect.Operation {
	return &effect.Operation{Downstreams: map[string]effect.Downstream{"idle": idle{}}, Render: renderThing}
}

// TestHeartbeatOutlivesLease: an execution allowed to run longer than its
// lease keeps the lease alive, so it finishes and commits even though it
// ran past the lease it started with. (An effect-bearing operation, whose
// handler holds no business transaction, so the heartbeat also runs on
// SQLite.)
func TestHeartbeatOutlivesLease(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		const lease = 300 * time.Millisecond
		release := make(chan struct{})
		mw := &idemhttp.Middleware{
			Store: store,
			Operation: idemhttp.Operation{Name: "things.slow", APIRevision: "v1", Effects: idleEffects(),
				Lease: lease, MaxDuration: time.Minute},
			Identity: func(*http.Request) (idem.Identity, error) { return idem.Identity{Tenant: "t", Principal: "p"}, nil },
		}
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			w.WriteHeader(201)
		})))
		t.Cleanup(srv.Close)
		k, _ := idem.ParseKey([]string{"slow"}, idem.KeyPolicy{})
		scope := idem.ScopeOf(idem.Identity{Tenant: "t", Principal: "p"}, "things.slow", "v1", k)

		done := make(chan int)
		go func() {
			req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "slow")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- -1
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		// Watch the record until its lease has been extended past the end
		// of the lease it was reserved with plus a whole lease more: the
		// execution has then outlived its original lease.
		var first time.Time
		deadline := time.Now().Add(30 * time.Second)
		for {
			rec, err := store.Get(t.Context(), scope)
			if err != nil && !errors.Is(err, registry.ErrNotFound) {
				t.Fatal(err)
			}
			if err == nil {
				if first.IsZero() {
					first = rec.LeaseUntil
				}
				if rec.LeaseUntil.After(first.Add(lease)) && time.Now().After(first) {
					if rec.OwnerGen != 1 {
						t.Fatalf("the live execution was taken over: generation %d", rec.OwnerGen)
					}
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the lease was never extended")
			}
			<-time.After(lease / 10) // polling interval of the observer, not synchronisation
		}
		close(release)
		if status := <-done; status != 201 {
			t.Fatalf("the execution that outlived its lease answered %d, want 201", status)
		}
		rec, err := store.Get(t.Context(), scope)
		if err != nil || rec.State != idem.StateSucceeded {
			t.Errorf("after the heartbeat run: %v %v, want SUCCEEDED", rec.State, err)
		}
	})
}
