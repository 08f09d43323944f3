package registry

import (
	"database/sql"
	"errors"
	"fmt"
)

// The business transaction as a *sql.Tx, for code written on
// database/sql (plain *sql.Tx, GORM, sqlx, sqlc): SQLTx returns the one
// transaction the Tx stands for, so that what the code writes through it
// commits together with the outcome, or not at all, exactly as the
// statements of Tx itself.
//
// On every engine and in every style (Complete, ExecuteOnce, InTx, and
// ClaimAndExecute with the caller's *sql.Tx):
//
//   - The store ends the transaction, never the business code: it must
//     not call Commit or Rollback on the *sql.Tx. Commit is refused
//     (ErrTxOwned) and rolls the transaction back; Rollback rolls back;
//     either way the store then records nothing. (On SQLite and MySQL
//     the guard sits in the connections the drivers' Open makes; a
//     *sql.DB of the caller's given to their OpenDB has none, and there
//     a Commit ends the store's own transaction — never do it.)
//   - Statements use the database's own placeholders: $1 … on PostgreSQL
//     and SQLite, ? on MySQL/MariaDB (Tx translates $n; the *sql.Tx does
//     not).
//   - ctx of each statement is the caller's, as for Tx. On SQLite, a
//     statement interrupted by its ctx ending rolls back the whole
//     group-committed batch (see idemsqlite's ExecuteOnce); Tx guards
//     against that, the *sql.Tx does not.
//
// On PostgreSQL the *sql.Tx runs through pgx's stdlib driver on the very
// connection and server transaction of the record (idempg's SQLTx): in
// Complete and ExecuteOnce, ask for it before the transaction's first
// statement through Tx, or SQLTx fails with ErrNoSQLTx. The pgx.Tx of a caller's ClaimAndExecute cannot
// be had as a *sql.Tx: use idempg's ClaimAndExecuteSQL.

// ErrNoSQLTx: the Tx cannot be had as a *sql.Tx — its driver's
// transaction is not one, it was asked for too late (after the first
// statement, on PostgreSQL), or there is no Tx at all. Nothing was
// written or ended.
var ErrNoSQLTx = errors.New("registry: no *sql.Tx for this transaction")

// ErrTxOwned is returned by Commit of a *sql.Tx that the store handed
// out (SQLTx): the store commits it together with the outcome. The
// transaction has been rolled back and the outcome will not be recorded.
var ErrTxOwned = errors.New("registry: the store commits this transaction with the outcome; do not commit it")

// SQLTxer is implemented by a Tx whose transaction can be had as a
// *sql.Tx in some other way than Native (idempg's, and wrappers that
// must pass the call on). SQLTx returns it, or an error wrapping
// ErrNoSQLTx.
type SQLTxer interface {
	SQLTx() (*sql.Tx, error)
}

// SQLTx returns tx's transaction as a *sql.Tx that commits together with
// the outcome (see above): through tx's SQLTx method if it has one, else
// Native when that is a *sql.Tx (SQLite, MySQL). It returns an error
// wrapping ErrNoSQLTx when there is none (nil tx, a pgx.Tx of the
// caller's). Asking twice returns the same *sql.Tx. Not safe for
// concurrent use, as tx is not.
func SQLTx(tx Tx) (*sql.Tx, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: no business transaction", ErrNoSQLTx)
	}
	if s, ok := tx.(SQLTxer); ok {
		return s.SQLTx()
	}
	native := tx.Native()
	if stx, ok := native.(*sql.Tx); ok && stx != nil {
		return stx, nil
	}
	return nil, fmt.Errorf("%w: the driver's transaction is a %T", ErrNoSQLTx, native)
}
