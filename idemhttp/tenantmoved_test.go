package idemhttp_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// TestTenantMoved: once the registry fences a tenant
// (registry.TenantFencer.FenceTenant), a new key of that tenant is refused
// 503 TENANT_MOVED, problem+json with Retry-After, its handler never
// committing anything — in the two-phase and the one-transaction style
// alike — while a replay of one of its old keys still answers the stored
// response and another tenant is served. The middleware stores the
// caller's tenant with every claim (Claim.Tenant), which is what the
// fence matches. With the replay cache on (its entry warmed by a replay
// before the fence) the fenced tenant's replay is the same stored 201 and
// its new key the same 503 TENANT_MOVED: the cache holds settled records
// only, and the fence changes none.
// threat:tenant-split-brain threat:tenant-bytes-5xx
func TestTenantMoved(t *testing.T) {
	const hostile = "acme\x00moved\xff"

	stores(t, func(t *testing.T, store registry.Store) {
		for i := range 4 {
			once, cached := i%2 == 1, i >= 2
			f := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) {
				mw.Operation.OneTransaction = once
				mw.Operation.Name = map[bool]string{false: "things.two-phase", true: "things.once"}[once]
				if cached {
					mw.Operation.Name += ".cached"
					mw.Operation.ReplayCache = idemhttp.ReplayCache{Entries: 10}
				}
				mw.Identity = func(r *http.Request) (idem.Identity, error) {
					p := r.Header.Get("X-Principal")
					if p == "" {
						return idem.Identity{}, errors.New("no principal")
					}
					tenant := r.Header.Get("X-Tenant")
					if tenant == "hostile" { // bytes no header carries go only into the hash
						tenant = hostile
					}
					return idem.Identity{Tenant: tenant, Principal: p}, nil
				}
			})
			acme := []string{"X-Tenant", "hostile"}
			old := f.post("old", `{"n":1}`, acme...)
			if old.status != 201 {
				t.Fatalf("once=%v: first request: %+v", once, old)
			}
			if cached { // the replay that caches the record
				if warm := f.post("old", `{"n":1}`, acme...); warm.status != 201 || warm.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("cached, once=%v: replay before the fence: %+v", once, warm)
				}
			}
			if err := store.(registry.TenantFencer).FenceTenant(t.Context(), hostile, "b"); err != nil {
				t.Fatal(err)
			}
			calls, effects := f.app.calls.Load(), f.effects()
			moved := f.post("new", `{"n":2}`, acme...)
			if moved.status != 503 || code(moved) != string(idem.CodeTenantMoved) ||
				moved.header.Get("Content-Type") != "application/problem+json" || moved.header.Get("Retry-After") == "" {
				t.Errorf("once=%v: a new key of the fenced tenant: %d %s %v, want 503 TENANT_MOVED problem+json with Retry-After",
					once, moved.status, moved.body, moved.header)
			}
			if f.effects() != effects {
				t.Errorf("once=%v: the refused request committed business rows", once)
			}
			again := f.post("new", `{"n":2}`, acme...)
			if again.status != 503 || code(again) != string(idem.CodeTenantMoved) {
				t.Errorf("once=%v: a retry of the refused key: %d %s", once, again.status, again.body)
			}
			replay := f.post("old", `{"n":1}`, acme...)
			if replay.status != 201 || replay.body != old.body || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("once=%v: replay of an old key of the fenced tenant: %+v, want the stored 201", once, replay)
			}
			if n := f.app.calls.Load() - calls; n > 2 {
				t.Errorf("once=%v: the handler ran %d times for refused requests", once, n)
			}
			other := f.post("new", `{"n":2}`, "X-Tenant", "globex")
			if other.status != 201 {
				t.Errorf("once=%v: another tenant: %+v, want 201", once, other)
			}
			if err := store.(registry.TenantFencer).UnfenceTenant(t.Context(), hostile); err != nil {
				t.Fatal(err)
			}
			if back := f.post("new", `{"n":2}`, acme...); back.status != 201 {
				t.Errorf("once=%v: after the fence is lifted: %+v, want 201", once, back)
			}
		}
	})
}
