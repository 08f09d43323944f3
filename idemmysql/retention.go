package idemmysql

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed retention.sql
var retentionFiles embed.FS

// retentionQueries are the named queries of retention.sql.
var retentionQueries = sqlfile.MustLoad(retentionFiles, "retention.sql")

var _ registry.Pruner = (*Store)(nil)

// Prune runs one retention pass of up to limit records per step, in one
// transaction: terminal records past retention and abandoned reservations
// become tombstones, and tombstones past their TTL are deleted with their
// published outbox messages, effects, reconciliations, lookups and
// pending settlements (the deletion triggers allow exactly that). A
// deadlock with concurrent writers runs the pass again. ctx governs the
// call.
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

func prune(ctx context.Context, tx *sql.Tx, nowParam any, limit int) (registry.PruneResult, error) {
	now, err := txNow(ctx, tx, nowParam)
	if err != nil {
		return registry.PruneResult{}, err
	}
	retired, err := exec(ctx, tx, retentionQueries.Get("PruneRetire"), now, limit)
	if err != nil {
		return registry.PruneResult{}, err
	}
	abandoned, err := exec(ctx, tx, retentionQueries.Get("PruneRetireAbandoned"), now, limit)
	if err != nil {
		return registry.PruneResult{}, err
	}
	rows, err := queryRows(ctx, tx, retentionQueries.Get("PruneExpiredTombstones"), now, limit)
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
		// The operations first: the other tables' deletion triggers
		// allow a row whose operation is gone or an expiring tombstone.
		for _, q := range []string{"PruneDelete", "PruneDeleteOutbox", "PruneDeleteEffects", "PruneDeleteReconciliations",
			"PruneDeleteLookups", "PruneDeletePending", "PruneDeleteRecoveryAttempts"} {
			if _, err := exec(ctx, tx, retentionQueries.Get(q), string(list)); err != nil {
				return registry.PruneResult{}, err
			}
		}
	}
	return registry.PruneResult{Retired: int(retired + abandoned), Deleted: len(ids)}, nil
}
