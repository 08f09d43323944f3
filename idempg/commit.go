package idempg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A COMMIT is waited for whatever its caller's context does.
//
// With synchronous standbys, PostgreSQL's COMMIT writes the commit record
// locally and then waits for a standby to confirm it; the transaction
// stays invisible to everyone meanwhile. A cancel request ends that wait
// early, and the transaction becomes visible on the primary although no
// standby has it: a retry reading it is answered from it, and a failover
// then loses what was answered. pgx sends a cancel request whenever it
// abandons a connection whose context ended mid-statement (its
// asyncClose), so a request that runs out of time during a COMMIT would
// do exactly that. Every commit that makes an outcome or an effect
// intent visible therefore runs under context.WithoutCancel: ctx governs
// the transaction up to its COMMIT, and the COMMIT is waited for (with a
// stalled standby, until it confirms). TestCommitOutlivesContext.

// commitCtx is the context a COMMIT runs under: ctx's values, never its
// end.
func commitCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// inTx runs fn in a transaction on pool and commits it if fn returns nil,
// else rolls it back and returns fn's error — as pgx.BeginFunc, but the
// COMMIT runs under commitCtx. ctx governs the rest.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit; a failed rollback closes the connection
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(commitCtx(ctx))
}
