package idempg

import (
	"cmp"
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/registry"
)

// ClaimAndExecuteSQL is ClaimAndExecute for a caller whose transaction is
// a *sql.Tx of pgx's stdlib driver (sql.Open("pgx", …), stdlib.OpenDB,
// stdlib.OpenDBFromPool — on the Store's database): the claim, fn's
// statements and the outcome all run in tx, through database/sql, and
// the caller commits tx; everything else is as ClaimAndExecute says. fn
// gets a registry.Tx over tx ($1 … placeholders), whose SQLTx and Native
// return tx itself (registry.SQLTx). If the claim insert fails, tx is
// rolled back and the scope's record decides, as in ClaimAndExecute. A
// *sql.Tx of another driver (lib/pq) fails at the claim: its parameters
// are arrays and byte strings that only pgx encodes as idem needs.
//
// Round trips: the claim and the outcome one each, as ClaimAndExecute's.
func (s *Store) ClaimAndExecuteSQL(ctx context.Context, tx *sql.Tx, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	now, goNow := s.clock()
	query, args := "Claim", claimArgs(c, newOperationID(c, goNow), now)
	if c.MaxActive > 0 {
		query, args = "ClaimLimited", append(args, c.MaxActive)
	}
	q := sqlQuerier{tx}
	rec, err := s.scanRecord(q.QueryRow(ctx, queries.Get(query), args...))
	if errors.Is(err, sql.ErrNoRows) { // the writer fence or the active limit held
		err = cmp.Or(writerFenced(ctx, q, c.WriterEpoch), registry.ErrActiveLimit)
	}
	if err != nil {
		_ = tx.Rollback() // its error adds nothing: the transaction is over either way
		return s.lostInsert(ctx, "claim", c, err)
	}
	out, err := fn(ctx, sqlAdapter{tx}, rec)
	if err != nil {
		return registry.Result{}, err
	}
	done, err := s.finish(ctx, q, rec, out, now)
	if err != nil {
		return registry.Result{}, err
	}
	return registry.Result{Verdict: registry.Execute, Record: done}, nil
}

// sqlQuerier is a *sql.Tx as a rowQuerier.
type sqlQuerier struct{ tx *sql.Tx }

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

// sqlAdapter is the registry.Tx over a caller's *sql.Tx
// (ClaimAndExecuteSQL); its errors are the database's, untranslated.
type sqlAdapter struct{ tx *sql.Tx }

func (a sqlAdapter) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := a.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (a sqlAdapter) QueryRow(ctx context.Context, query string, args ...any) registry.Row {
	return a.tx.QueryRowContext(ctx, query, args...)
}

func (a sqlAdapter) Query(ctx context.Context, query string, args ...any) (registry.Rows, error) {
	rows, err := a.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return &sqlRows{rows: rows}, nil
}

// Native returns the *sql.Tx.
func (a sqlAdapter) Native() any { return a.tx }

// SQLTx returns the *sql.Tx.
func (a sqlAdapter) SQLTx() (*sql.Tx, error) { return a.tx, nil }

// sqlRows are *sql.Rows as registry.Rows: a failed Scan ends the
// iteration and Err reports it, as registry.Rows says.
type sqlRows struct {
	rows *sql.Rows
	err  error // a failed Scan's
}

func (r *sqlRows) Next() bool { return r.err == nil && r.rows.Next() }

func (r *sqlRows) Scan(dest ...any) error {
	if err := r.rows.Scan(dest...); err != nil {
		r.err = cmp.Or(r.err, err)
		_ = r.rows.Close()
		return err
	}
	return nil
}

func (r *sqlRows) Err() error { return cmp.Or(r.err, r.rows.Err()) }

func (r *sqlRows) Close() { _ = r.rows.Close() }
