package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestTenantOldKeysReplayAfterMove: a tenant's keys answered by one
// registry, fenced there, exported and imported into another registry of
// the same driver, replay from a server on the new registry with the
// byte-identical response, status and headers, the handler not run
// again, in the two-phase and the one-transaction style; the old
// registry refuses the tenant's new keys 503 TENANT_MOVED, and the new
// one executes them.
// threat:tenant-copy-altered
func TestTenantOldKeysReplayAfterMove(t *testing.T) {
	pgtest.EachDriver(t, "from.db", func(t *testing.T, driver, dsn string) {
		to := "sqlite:" + filepath.Join(t.TempDir(), "to.db")
		if driver == "postgres" {
			to = pgtest.DSN(t)
		}
		open := func(dsn string) registry.Store {
			st, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			if err := st.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
				_, err := tx.Exec(ctx, `CREATE TABLE mw_effects (operation_id TEXT NOT NULL, note TEXT)`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return st
		}
		oldStore, newStore := open(dsn), open(to)
		shape := func(once bool) func(*idemhttp.Middleware) {
			return func(mw *idemhttp.Middleware) {
				mw.Operation.OneTransaction = once
				mw.Identity = func(r *http.Request) (idem.Identity, error) {
					p := r.Header.Get("X-Principal")
					if p == "" {
						return idem.Identity{}, errors.New("no principal")
					}
					return idem.Identity{Tenant: r.Header.Get("X-Tenant"), Principal: p}, nil
				}
			}
		}
		acme := []string{"X-Tenant", "acme"}
		answers := map[string]result{}
		for _, once := range []bool{false, true} {
			f := newFixtureWith(t, oldStore, idemhttp.Enforce, shape(once))
			key := map[bool]string{false: "two-phase", true: "once"}[once]
			r := f.post(key, `{"n":1}`, acme...)
			if r.status != 201 {
				t.Fatalf("%s on the old registry: %+v", key, r)
			}
			answers[key] = r
		}
		mover := oldStore.(registry.TenantMover)
		if err := mover.FenceTenant(t.Context(), "acme", "new"); err != nil {
			t.Fatal(err)
		}
		var stream bytes.Buffer
		if _, err := mover.ExportTenant(t.Context(), "acme", &stream); err != nil {
			t.Fatal(err)
		}
		if _, err := newStore.(registry.TenantMover).ImportTenant(t.Context(), &stream); err != nil {
			t.Fatal(err)
		}
		for _, once := range []bool{false, true} {
			key := map[bool]string{false: "two-phase", true: "once"}[once]
			old := newFixtureWith(t, oldStore, idemhttp.Enforce, shape(once))
			if r := old.post(key+"-new", `{"n":2}`, acme...); r.status != 503 || code(r) != string(idem.CodeTenantMoved) {
				t.Errorf("%s: a new key on the old registry: %d %s, want 503 TENANT_MOVED", key, r.status, r.body)
			}
			f := newFixtureWith(t, newStore, idemhttp.Enforce, shape(once))
			r := f.post(key, `{"n":1}`, acme...)
			want := answers[key]
			if r.status != want.status || r.body != want.body || r.header.Get("Idempotent-Replayed") != "true" ||
				r.header.Get("Idempotency-Operation") != want.header.Get("Idempotency-Operation") ||
				r.header.Get("Location") != want.header.Get("Location") || r.header.Get("ETag") != want.header.Get("ETag") {
				t.Errorf("%s: the old key on the new registry: %+v, want the replay of %+v", key, r, want)
			}
			if n := f.app.calls.Load(); n != 0 {
				t.Errorf("%s: the handler ran %d times on the new registry for an old key", key, n)
			}
			if r := f.post(key+"-new", `{"n":2}`, acme...); r.status != 201 {
				t.Errorf("%s: a new key on the new registry: %+v, want 201", key, r)
			}
		}
	})
}
