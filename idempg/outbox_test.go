package idempg

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// TestMigration008Upgrade: outbox rows written before migration 008 stay
// valid after it: pending ones (never claimed, or with an expired claim)
// are claimed with no attempts, a live claim still holds, published ones
// stay published, and the new compare-and-sets work on them.
func TestMigration008Upgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, dsn := upgradeFrom(t, "008")
	const insert = `INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, claimed_until, published_at)
		VALUES ($1, $2, 'upgrade', '{}', now() - interval '1 hour', now() + $3 * interval '1 minute', $4)`
	for _, r := range []struct {
		id        string
		claim     int // minutes from now; 0: none
		published any
	}{{"op_new/0", 0, nil}, {"op_expired/0", -1, nil}, {"op_held/0", 60, nil}, {"op_done/0", -5, time.Now()}} {
		var claim any
		if r.claim != 0 {
			claim = r.claim
		}
		if _, err := pool.Exec(ctx, insert, r.id, strings.TrimSuffix(r.id, "/0"), claim, r.published); err != nil {
			t.Fatal(err)
		}
	}

	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatalf("Open (migrating to 008): %v", err)
	}
	defer s.Close()
	msgs, err := s.ClaimOutbox(ctx, 10, time.Minute)
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
		if m.Attempts != 0 || m.LastError != "" || !m.LastAttemptAt.IsZero() {
			t.Errorf("old message %s claimed with attempts %d, error %q at %v; want none", m.ID, m.Attempts, m.LastError, m.LastAttemptAt)
		}
	}
	if err != nil || !slices.Equal(ids, []string{"op_new/0", "op_expired/0"}) {
		t.Errorf("ClaimOutbox after the upgrade: %v (err %v), want the two claimable pending messages", ids, err)
	}
	if st, err := s.OutboxStats(ctx); err != nil || st.Pending != 3 || st.Dead != 0 {
		t.Errorf("OutboxStats after the upgrade: %+v (err %v), want 3 pending, 0 dead", st, err)
	}
	if err := s.FailOutbox(ctx, registry.OutboxFailure{ID: "op_held/0", Error: "x", Dead: true}); err != nil {
		t.Errorf("FailOutbox of an old message: %v", err)
	}
	if err := s.RequeueOutbox(ctx, "op_held/0"); err != nil {
		t.Errorf("RequeueOutbox of an old message: %v", err)
	}
}
