// Package idempg is the PostgreSQL driver of idem's registry: a
// [registry.Store] on a pgx connection pool, plus the in-transaction style
// [Store.ClaimAndExecute] on a caller's pgx.Tx.
//
// Open connects, applies the embedded migrations (migrations/*.sql, tracked
// in idem_schema_migrations) and returns a Store:
//
//	st, err := idempg.Open(ctx, "postgres://app@db/payments", idempg.Options{})
//	if err != nil { … }
//	defer st.Close()
//
// Every state change is one compare-and-set statement on (scope, owner
// generation, expected states); the migration installs a trigger that
// refuses any transition idem.CanTransition does not list. Times are
// database time (statement_timestamp()) unless Options.Now is set.
//
// Errors are translated at the driver boundary (errors.go): a missing
// record is registry.ErrNotFound, a stale owner generation or state is
// registry.ErrFenced, and connection failures, timeouts, cancelled
// statements, serialization failures and deadlocks wrap
// registry.ErrUnavailable. Unique violations are never turned into key
// conflicts: Reserve returns the existing record instead, and a lost
// in-transaction claim re-reads the record before deciding.
//
// ExecuteOnce, the one-transaction style, claims the scope before the
// business function's first statement: a transaction-scoped advisory lock
// in the two-integer space, class 1768187245 ("idem"), named after the
// scope's first four bytes (idem_claim, migration 011). An application
// that uses two-integer advisory locks should avoid that class.
//
// The Store is a [registry.Watcher] (watch.go): a Prefer: wait for an
// operation in flight in another process wakes on the commit that ends it,
// through LISTEN/NOTIFY on one dedicated connection per Store, opened by
// the first Watch. Only scopes with a waiter row (idem_waiters, migration
// 012) are notified, so the hot path never takes the notify lock when
// nobody waits. A Store behind a pooler in transaction mode (PgBouncer),
// which cannot LISTEN, should set Options.NoListen: waiters then poll.
//
// database/sql: a business function that asks its Tx for a *sql.Tx
// (registry.SQLTx) before its first statement gets one on the call's own
// connection and server transaction, through pgx's stdlib driver and a
// *sql.DB over the Store's pool (sqltx.go); its Commit is refused
// (registry.ErrTxOwned). [Store.ClaimAndExecuteSQL] is the in-transaction
// style on a caller's *sql.Tx of pgx's stdlib driver.
//
// SQL lives in queries.sql and migrations/*.sql, not in Go strings.
package idempg
