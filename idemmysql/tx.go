package idemmysql

import (
	"cmp"
	"context"
	"database/sql"

	"github.com/idemkit/idem/registry"
)

// sqlTx is the registry.Tx handed to business functions: $1 …
// placeholders, rewritten to MySQL's "?" (a repeated $N binds its argument
// again; see placeholders.go); a statement without $N is sent as it is,
// so MySQL's own "?" placeholders work too. Native returns the *sql.Tx,
// on which statements use "?" only. Its errors are the database's,
// untranslated.
type sqlTx struct{ tx *sql.Tx }

// Exec runs a statement and returns the number of rows it matched
// (clientFoundRows).
func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return exec(ctx, t.tx, query, args...)
}

// QueryRow runs a query expected to return at most one row.
func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) registry.Row {
	return queryRow(ctx, t.tx, query, args...)
}

// Query runs a query and returns its rows.
func (t sqlTx) Query(ctx context.Context, query string, args ...any) (registry.Rows, error) {
	rows, err := queryRows(ctx, t.tx, query, args...)
	if err != nil {
		return nil, err
	}
	return &sqlRows{rows: rows}, nil
}

// Native returns the *sql.Tx.
func (t sqlTx) Native() any { return t.tx }

// sqlRows are *sql.Rows as registry.Rows: a failed Scan ends the
// iteration and Err reports it, as registry.Rows says.
type sqlRows struct {
	rows *sql.Rows
	err  error // of a failed Scan or of closing
}

func (r *sqlRows) Next() bool { return r.err == nil && r.rows.Next() }

func (r *sqlRows) Scan(dest ...any) error {
	err := r.rows.Scan(dest...)
	if err != nil && r.err == nil {
		r.err = err
		r.Close()
	}
	return err
}

func (r *sqlRows) Err() error { return cmp.Or(r.rows.Err(), r.err) }

func (r *sqlRows) Close() {
	if err := r.rows.Close(); err != nil && r.err == nil {
		r.err = err
	}
}
