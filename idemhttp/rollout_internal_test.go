package idemhttp

import (
	"testing"

	"github.com/idemkit/idem/idemsqlite"
)

// TestMarkEnforcedStaleRow: a request whose row was read before another
// request of this process marked the operation enforced (concurrent
// first requests) is served under the EnforcedAt the registry holds —
// not refused as if an operator had just set the operation off (the
// 503 one half-closing client of forty got on a fresh PostgreSQL).
func TestMarkEnforcedStaleRow(t *testing.T) {
	store, err := idemsqlite.OpenMemory(t.Context(), idemsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	r := &Rollouts{Store: store}
	stale, err := store.Rollout(t.Context(), "things.create")
	if err != nil || !stale.EnforcedAt.IsZero() {
		t.Fatalf("fresh row %+v, %v", stale, err)
	}
	first, err := r.markEnforced(t.Context(), "things.create", stale)
	if err != nil || first.EnforcedAt.IsZero() {
		t.Fatalf("first mark: %+v, %v; want EnforcedAt", first, err)
	}
	again, err := r.markEnforced(t.Context(), "things.create", stale)
	if err != nil || !again.EnforcedAt.Equal(first.EnforcedAt) {
		t.Fatalf("the stale row after the mark: %+v, %v; want EnforcedAt %v", again, err, first.EnforcedAt)
	}
}
