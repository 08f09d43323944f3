package idemsqlite

import (
	"context"
	"database/sql"
	"embed"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

// recovery.sql is its own embedded file: store.go embeds queries.sql only.
//
//go:embed recovery.sql
var recoveryFiles embed.FS

// recoveryQueries holds the named statements of recovery.sql. They are not
// prepared: a recovery worker lists once every few seconds.
var recoveryQueries = sqlfile.MustLoad(recoveryFiles, "recovery.sql")

var _ registry.LeaseScanner = (*Store)(nil)

// ExpiredLeases returns up to limit RESERVED or EXECUTING records whose
// lease has expired at the store's "now", oldest lease first; see
// registry.LeaseScanner. The IDs and the records are read in one read-only
// transaction, so they are one snapshot. It locks nothing: the worker's
// TakeOver is the arbiter.
func (s *Store) ExpiredLeases(ctx context.Context, limit int) ([]registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	recs, err := s.recordsByIDs(ctx, recoveryQueries.Get("ExpiredLeaseIDs"), s.nowParam(), limit)
	if err != nil {
		return nil, s.fail("expired leases", err)
	}
	return recs, nil
}

// recordsByIDs runs idsQuery, which returns operation IDs, and reads their
// records with GetByID, all in one read-only (deferred) transaction: a
// consistent snapshot in WAL mode that takes no write lock. The records
// come back in the IDs' order. Errors are returned untranslated.
func (s *Store) recordsByIDs(ctx context.Context, idsQuery string, args ...any) ([]registry.Record, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to commit
	rows, err := tx.QueryContext(ctx, idsQuery, args...)
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	recs := make([]registry.Record, 0, len(ids))
	get := s.txStmt(ctx, tx, "GetByID")
	for _, id := range ids {
		rec, err := s.scanRecord(get.QueryRowContext(ctx, id))
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}
