package idemhttp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// TestMarkEnforcedRefusedByOffRow, in both styles: a server configured
// to enforce, whose cached row set no mode, meets a row an operator has
// since set off (without force, the operation never enforced):
// MarkEnforced leaves that row as it is, EnforcedAt unset. The request
// must then not be accepted under enforce — a record written without a
// committed EnforcedAt is one a later shadow would execute again — but
// served as the fresh row says (off: a plain execution, no record), and
// the next request too.
// Proves threat:rollout-off-unforced (docs/threat-model.md).
func TestMarkEnforcedRefusedByOffRow(t *testing.T) {
	bothStyles(t, func(t *testing.T, style func(*idemhttp.Middleware)) {
		stores(t, func(t *testing.T, store registry.Store) {
			f := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, time.Hour, style))
			// Caches the row (none: the configured enforce) without
			// accepting anything.
			if r := f.post("", `{}`); r.status != 400 || code(r) != "KEY_MISSING" {
				t.Fatalf("no key under enforce: %+v", r)
			}
			setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutOff})
			for i, key := range []string{"k", "k2"} {
				r := f.post(key, `{}`)
				if r.status != 201 || r.header.Get("Idempotency-Contract") != "" {
					t.Errorf("request %d under the fresh off row: %+v, want a plain 201", i, r)
				}
				if rec, err := store.Get(t.Context(), scopeOf(t, key)); !errors.Is(err, registry.ErrNotFound) {
					t.Errorf("a record was written with EnforcedAt unset: %+v, %v", rec, err)
				}
			}
			row, err := store.Rollout(t.Context(), thingsOp)
			if err != nil || row.Mode != registry.RolloutOff || !row.EnforcedAt.IsZero() {
				t.Errorf("row %+v, %v: want off, never enforced", row, err)
			}
		})
	})
}
