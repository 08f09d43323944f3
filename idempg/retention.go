package idempg

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// retention.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed retention.sql
var retentionFS embed.FS

// retentionQueries holds the named statements of retention.sql.
var retentionQueries = sqlfile.MustLoad(retentionFS, "retention.sql")

var _ registry.Pruner = (*Store)(nil)

// Prune retires up to limit expired terminal records and deletes up to
// limit tombstones whose TombstoneTTL has elapsed, at the store's "now";
// see registry.Pruner. It is one statement (retention.sql), so it commits
// atomically and durably; concurrent prunes, on any number of processes,
// skip the rows another one holds (FOR UPDATE SKIP LOCKED) instead of
// waiting. A retry racing it sees the record either whole or as a
// tombstone, never missing: only tombstones with a TombstoneTTL are ever
// deleted. ctx governs the statement.
func (s *Store) Prune(ctx context.Context, limit int) (registry.PruneResult, error) {
	if limit <= 0 {
		return registry.PruneResult{}, nil
	}
	now, _ := s.clock()
	var retired, deleted int64
	if err := s.pool.QueryRow(ctx, retentionQueries.Get("Prune"), limit, now).Scan(&retired, &deleted); err != nil {
		return registry.PruneResult{}, fmt.Errorf("idempg: prune: %w", translate(err))
	}
	return registry.PruneResult{Retired: int(retired), Deleted: int(deleted)}, nil
}

// tombstoneTTL is the tombstone_ttl parameter of a claim: microseconds
// (at least 1 for a positive TTL), or nil to keep the tombstone forever.
func tombstoneTTL(c registry.Claim) *int64 {
	ttl := c.TombstoneTTLOrForever()
	if ttl == 0 {
		return nil
	}
	us := max(micros(ttl), 1)
	return &us
}

// scanTombstone fills the retention fields of r from the columns
// retired_at, tombstone_until and tombstone_ttl (migration 004).
func scanTombstone(r *registry.Record, retiredAt, tombstoneUntil *time.Time, ttl *int64) {
	if retiredAt != nil {
		r.RetiredAt = retiredAt.UTC()
	}
	if tombstoneUntil != nil {
		r.TombstoneUntil = tombstoneUntil.UTC()
	}
	if ttl != nil {
		r.TombstoneTTL = time.Duration(*ttl) * time.Microsecond
	}
}
