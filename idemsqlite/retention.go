package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// retention.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed retention.sql
var retentionFiles embed.FS

// retentionQueries holds the named statements of retention.sql. They are
// not prepared: a server prunes about once a minute.
var retentionQueries = sqlfile.MustLoad(retentionFiles, "retention.sql")

var _ registry.Pruner = (*Store)(nil)

// Prune retires up to limit expired terminal records and deletes up to
// limit tombstones whose TombstoneTTL has elapsed, at the store's "now";
// see registry.Pruner. Everything runs in one write transaction (BEGIN
// IMMEDIATE when the Store came from Open) that commits durably, so it
// queues with the other writers: a concurrent Reserve sees the record
// either whole or as a tombstone, and concurrent prunes run one after the
// other. ctx governs the call.
func (s *Store) Prune(ctx context.Context, limit int) (registry.PruneResult, error) {
	if err := s.checkOpen(); err != nil {
		return registry.PruneResult{}, err
	}
	if limit <= 0 {
		return registry.PruneResult{}, nil
	}
	var res registry.PruneResult
	err := s.writeTx(ctx, "prune", func(tx *sql.Tx, now any) (err error) {
		res, err = prune(ctx, tx, now, limit)
		return err
	})
	if err != nil {
		return registry.PruneResult{}, err
	}
	return res, nil
}

// prune runs the statements of retention.sql in tx.
func prune(ctx context.Context, tx *sql.Tx, nowParam any, limit int) (registry.PruneResult, error) {
	var now int64
	if err := tx.QueryRowContext(ctx, retentionQueries.Get("PruneNow"), nowParam).Scan(&now); err != nil {
		return registry.PruneResult{}, err
	}
	r, err := tx.ExecContext(ctx, retentionQueries.Get("PruneRetire"), now, limit)
	if err != nil {
		return registry.PruneResult{}, err
	}
	retired, err := r.RowsAffected()
	if err != nil {
		return registry.PruneResult{}, err
	}
	if r, err = tx.ExecContext(ctx, retentionQueries.Get("PruneRetireAbandoned"), now, limit); err != nil {
		return registry.PruneResult{}, err
	}
	abandoned, err := r.RowsAffected()
	if err != nil {
		return registry.PruneResult{}, err
	}
	retired += abandoned
	rows, err := tx.QueryContext(ctx, retentionQueries.Get("PruneDelete"), now, limit)
	if err != nil {
		return registry.PruneResult{}, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return registry.PruneResult{}, err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return registry.PruneResult{}, err
	}
	if err := rows.Err(); err != nil {
		return registry.PruneResult{}, err
	}
	if len(ids) > 0 {
		list, err := json.Marshal(ids)
		if err != nil {
			return registry.PruneResult{}, err
		}
		for _, q := range []string{"PruneDeleteOutbox", "PruneDeleteEffects", "PruneDeleteReconciliations",
			"PruneDeleteLookups", "PruneDeletePending", "PruneDeleteRecoveryAttempts"} {
			if _, err := tx.ExecContext(ctx, retentionQueries.Get(q), string(list)); err != nil {
				return registry.PruneResult{}, err
			}
		}
	}
	return registry.PruneResult{Retired: int(retired), Deleted: len(ids)}, nil
}

// tombstoneTTL is the tombstone_ttl argument of a claim: microseconds (at
// least 1 for a positive TTL), or nil to keep the tombstone forever.
func tombstoneTTL(c registry.Claim) any {
	ttl := c.TombstoneTTLOrForever()
	if ttl == 0 {
		return nil
	}
	return max(ttl.Microseconds(), 1)
}

// scanTombstone fills the retention fields of rec from the columns
// retired_at, tombstone_until and tombstone_ttl (migration 004).
func scanTombstone(rec *registry.Record, retired, tombstoneUntil, ttl sql.NullInt64) {
	if retired.Valid {
		rec.RetiredAt = fromMicros(retired.Int64)
	}
	if tombstoneUntil.Valid {
		rec.TombstoneUntil = fromMicros(tombstoneUntil.Int64)
	}
	if ttl.Valid {
		rec.TombstoneTTL = time.Duration(ttl.Int64) * time.Microsecond
	}
}
