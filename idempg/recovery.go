package idempg

import (
	"context"
	"embed"
	"fmt"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
	"github.com/jackc/pgx/v5"
)

// recovery.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed recovery.sql
var recoveryFS embed.FS

// recoveryQueries holds the named statements of recovery.sql.
var recoveryQueries = sqlfile.MustLoad(recoveryFS, "recovery.sql")

var _ registry.LeaseScanner = (*Store)(nil)

// ExpiredLeases returns up to limit RESERVED or EXECUTING records whose
// lease has expired at the store's "now", oldest lease first; see
// registry.LeaseScanner. The IDs and the records are read in one
// read-only REPEATABLE READ transaction, so they are one snapshot. It
// locks nothing: the worker's TakeOver is the arbiter.
func (s *Store) ExpiredLeases(ctx context.Context, limit int) ([]registry.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	now, _ := s.clock()
	recs, err := s.recordsByIDs(ctx, recoveryQueries.Get("ExpiredLeaseIDs"), now, limit)
	if err != nil {
		return nil, fmt.Errorf("idempg: expired leases: %w", translate(err))
	}
	return recs, nil
}

// recordsByIDs runs idsQuery, which returns operation IDs, and reads their
// records, all in one read-only REPEATABLE READ transaction so IDs and
// records are one snapshot; the records come back in the IDs' order with
// one batched round trip. Errors are returned untranslated.
func (s *Store) recordsByIDs(ctx context.Context, idsQuery string, args ...any) ([]registry.Record, error) {
	var recs []registry.Record
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, idsQuery, args...)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		batch := &pgx.Batch{}
		for _, id := range ids {
			batch.Queue(queries.Get("GetByID"), id)
		}
		results := tx.SendBatch(ctx, batch)
		defer results.Close()
		for range ids {
			rec, err := s.scanRecord(results.QueryRow())
			if err != nil {
				return err
			}
			recs = append(recs, rec)
		}
		return results.Close()
	})
	return recs, err
}
