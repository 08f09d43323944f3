package gate

import (
	"context"
	"embed"
	"fmt"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed verify.sql
var sqlFiles embed.FS

var queries = sqlfile.MustLoad(sqlFiles, "verify.sql")

// eachRow runs a query in tx and calls fn with a scan function per row.
func eachRow(ctx context.Context, tx registry.Tx, query string, args []any, fn func(scan func(dest ...any) error) error) error {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// OutboxMark returns the last outbox sequence number before a run, so
// Verify counts only the run's messages.
func OutboxMark(ctx context.Context, store registry.Store) (int64, error) {
	var seq int64
	err := store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, queries.Get("outbox_last_seq")).Scan(&seq)
	})
	if err != nil {
		return 0, fmt.Errorf("gate: reading the outbox: %w", err)
	}
	return seq, nil
}
