package idemsqlite

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// TestMigration007Upgrade: outbox rows written before migration 007 stay
// valid after it: pending ones (never claimed, or with an expired claim)
// are claimed with no attempts, a live claim still holds, published ones
// stay published, and the new compare-and-sets work on them.
func TestMigration007Upgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "upgrade.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migrateBefore(t, db, "007")
	now := time.Now().UnixMicro()
	const insert = `INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, claimed_until, published_at)
		VALUES ($1, $2, 'upgrade', CAST('{}' AS BLOB), $3, $4, $5)`
	minutes := func(n int64) int64 { return now + n*60_000_000 }
	for _, r := range []struct {
		id        string
		claim     any
		published any
	}{{"op_new/0", nil, nil}, {"op_expired/0", minutes(-1), nil}, {"op_held/0", minutes(60), nil}, {"op_done/0", minutes(-5), now}} {
		if _, err := db.ExecContext(ctx, insert, r.id, strings.TrimSuffix(r.id, "/0"), minutes(-60), r.claim, r.published); err != nil {
			t.Fatal(err)
		}
	}

	s, err := OpenDB(ctx, db, Options{})
	if err != nil {
		t.Fatalf("OpenDB (migrating to 007): %v", err)
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
