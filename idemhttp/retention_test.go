package idemhttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// Retention (SPEC E5) through HTTP: a retry whose record was retired into a
// tombstone is refused with 409 KEY_RETIRED and the operation ID, never
// replayed or executed; a different body still conflicts; once a tombstone
// with a TombstoneTTL is deleted, the key executes anew.

// retentionFixture is newFixture's fixture with an operation whose records
// expire after a millisecond (database time) and whose tombstones live ttl.
func retentionFixture(t *testing.T, store registry.Store, mode idemhttp.Mode, ttl time.Duration) *fixture {
	f := &fixture{t: t, store: store, app: &app{release: make(chan struct{}), started: make(chan struct{}, 10)}, reg: prometheus.NewRegistry()}
	mw := &idemhttp.Middleware{
		Store: store,
		Operation: idemhttp.Operation{Name: "things.create", APIRevision: "v1", FinalStatuses: []int{422},
			Mode: mode, Retention: time.Millisecond, TombstoneTTL: ttl},
		Identity: func(r *http.Request) (idem.Identity, error) {
			p := r.Header.Get("X-Principal")
			if p == "" {
				return idem.Identity{}, errors.New("no principal")
			}
			return idem.Identity{Tenant: "t", Principal: p}, nil
		},
		Metrics: idemhttp.NewMetrics(f.reg),
	}
	f.srv = httptest.NewServer(mw.Handler(f.app))
	t.Cleanup(f.srv.Close)
	return f
}

// pruneAfter waits d (database time runs on) and prunes once, checking the
// counts.
func (f *fixture) pruneAfter(d time.Duration, want registry.PruneResult) {
	f.t.Helper()
	time.Sleep(d)
	got, err := f.store.Prune(f.t.Context(), 100)
	if err != nil || got != want {
		f.t.Fatalf("Prune: %+v, %v; want %+v", got, err, want)
	}
}

// checkRetired checks r is the KEY_RETIRED refusal of operation opID.
func checkRetired(t *testing.T, what string, r result, opID string) {
	t.Helper()
	if r.status != http.StatusConflict || code(r) != "KEY_RETIRED" || r.header.Get("Content-Type") != "application/problem+json" ||
		r.header.Get("Idempotency-Operation") != opID || !strings.Contains(r.body, `"operation_id":"`+opID+`"`) ||
		r.header.Get("Idempotency-Contract") != idem.ContractVersion {
		t.Errorf("%s: %+v, want 409 KEY_RETIRED naming %s", what, r, opID)
	}
	if r.header.Get("Idempotent-Replayed") != "" || r.header.Get("Retry-After") != "" {
		t.Errorf("%s: a retired key's refusal carries Idempotent-Replayed or Retry-After: %+v", what, r.header)
	}
}

// Proves threat:restored-backup (docs/threat-model.md).
func TestReplayAfterPruneIsRetired(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := retentionFixture(t, store, idemhttp.Enforce, 0)
		first := f.post("old", `{"a":1}`)
		opID := first.header.Get("Idempotency-Operation")
		if first.status != 201 || opID == "" {
			t.Fatalf("first: %+v", first)
		}
		final := f.post("old-final", `{}`, "X-Test", "final")
		if again := f.post("old", `{"a":1}`); again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay before the prune: %+v", again)
		}
		f.pruneAfter(20*time.Millisecond, registry.PruneResult{Retired: 2})

		checkRetired(t, "replay after prune", f.post("old", `{"a":1}`), opID)
		checkRetired(t, "FAILED_FINAL after prune", f.post("old-final", `{}`), final.header.Get("Idempotency-Operation"))
		checkRetired(t, "with Prefer: wait", f.post("old", `{"a":1}`, "Prefer", "wait=2"), opID)
		conflict := f.post("old", `{"a":2}`)
		if conflict.status != 422 || code(conflict) != "PAYLOAD_CONFLICT" || conflict.header.Get("Idempotency-Operation") != "" ||
			strings.Contains(conflict.body, opID) {
			t.Errorf("different body on a tombstone: %+v, want 422 PAYLOAD_CONFLICT without the operation ID", conflict)
		}
		// Without TombstoneTTL the tombstone is never deleted.
		f.pruneAfter(20*time.Millisecond, registry.PruneResult{})
		checkRetired(t, "after another prune", f.post("old", `{"a":1}`), opID)
		if f.app.calls.Load() != 2 || f.effects() != 2 {
			t.Errorf("handler ran %d times, %d effects; want 2 and 2", f.app.calls.Load(), f.effects())
		}
		if n := f.counted("idem_requests_total", "outcome", "key_retired"); n != 4 {
			t.Errorf("key_retired counter %v, want 4", n)
		}
		// Another principal's key is another scope: it executes.
		if bob := f.post("old", `{"a":1}`, "X-Principal", "bob"); bob.status != 201 || bob.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("another principal with the same key: %+v", bob)
		}
	})
}

func TestTombstoneTTLFreesKey(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := retentionFixture(t, store, idemhttp.Enforce, 10*time.Millisecond)
		first := f.post("k", `{"a":1}`)
		opID := first.header.Get("Idempotency-Operation")
		if first.status != 201 || opID == "" {
			t.Fatalf("first: %+v", first)
		}
		f.pruneAfter(20*time.Millisecond, registry.PruneResult{Retired: 1})
		checkRetired(t, "before the tombstone's TTL", f.post("k", `{"a":1}`), opID)
		f.pruneAfter(30*time.Millisecond, registry.PruneResult{Deleted: 1})
		again := f.post("k", `{"a":1}`)
		if again.status != 201 || again.header.Get("Idempotent-Replayed") != "" || again.header.Get("Idempotency-Operation") == opID ||
			again.header.Get("Idempotency-Operation") == "" {
			t.Errorf("after the tombstone was deleted: %+v, want a new execution (first was %s)", again, opID)
		}
		// The new operation is an ordinary one: replayed, then retired.
		if r := f.post("k", `{"a":1}`); r.status != 201 || r.body != again.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay of the new operation: %+v", r)
		}
		if f.app.calls.Load() != 2 || f.effects() != 2 {
			t.Errorf("handler ran %d times, %d effects; want 2 and 2", f.app.calls.Load(), f.effects())
		}
	})
}

func TestDecideRetired(t *testing.T) {
	fp, other := idem.Fingerprint{1}, idem.Fingerprint{2}
	rec := registry.Record{State: idem.StateSucceeded, Fingerprint: fp, OperationID: "op_1", RetiredAt: time.Now()}
	for _, c := range []struct {
		fp   idem.Fingerprint
		want idemhttp.Decision
	}{
		{fp, idemhttp.Decision{Verdict: registry.Retired, Code: idem.CodeKeyRetired}},
		{other, idemhttp.Decision{Verdict: registry.Conflict, Code: idem.CodePayloadConflict}},
	} {
		if got := idemhttp.Decide(rec, false, idemhttp.Request{Fingerprint: c.fp, Wait: time.Second}); got != c.want {
			t.Errorf("Decide on a tombstone, fingerprint %v: %+v, want %+v", c.fp[0], got, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Errorf("Handler accepted a negative TombstoneTTL")
		}
	}()
	mw := &idemhttp.Middleware{Store: struct{ registry.Store }{}, Operation: idemhttp.Operation{Name: "x", APIRevision: "v1", TombstoneTTL: -1}}
	mw.Identity = func(*http.Request) (idem.Identity, error) { return idem.Identity{}, nil }
	mw.Handler(http.NotFoundHandler())
}
