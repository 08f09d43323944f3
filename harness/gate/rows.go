package gate

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed verify.sql
var sqlFiles embed.FS

var queries = sqlfile.MustLoad(sqlFiles, "verify.sql")

// eachRow runs a query in tx and calls fn with a scan function per row.
// registry.Tx reads one row only; a multi-row read needs the driver's own
// transaction (Native), which is a pgx.Tx or a *sql.Tx.
func eachRow(ctx context.Context, tx registry.Tx, query string, args []any, fn func(scan func(dest ...any) error) error) error {
	switch ntx := tx.Native().(type) {
	case pgx.Tx:
		rows, err := ntx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		return drain(rows, fn)
	case *sql.Tx:
		rows, err := ntx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		return drain(rows, fn)
	}
	return fmt.Errorf("gate: cannot read rows through a %T", tx.Native())
}

// rowCursor is what pgx.Rows and *sql.Rows have in common.
type rowCursor interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// drain calls fn for every row of rows and returns the first error.
func drain(rows rowCursor, fn func(scan func(dest ...any) error) error) error {
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
