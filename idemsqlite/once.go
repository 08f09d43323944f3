package idemsqlite

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/ownedtx"
	"github.com/idemkit/idem/registry"
)

// ExecuteOnce is the one-transaction style (registry.Store.ExecuteOnce):
// the claim of c's scope, fn, and its outcome and outbox rows, recorded
// exactly as ClaimAndExecute does, commit together and durably, or not
// at all. SQLite's single writer makes the claim exact: a concurrent call
// meets the record first inserted (its verdict is returned with a nil
// error, nothing run), and no other connection ever sees the record
// before it is terminal; fn gets it as EXECUTING. An error from fn, an
// outcome that is not terminal (SUCCEEDED, FAILED_FINAL, REJECTED), or an
// error recording it rolls back this call's work and is returned (fn's
// error unchanged). c.MaxActive does not apply: nothing stays in flight.
//
// Group commit: concurrent calls queue, and one transaction (BEGIN
// IMMEDIATE, one fsync at COMMIT under synchronous=FULL) commits up to
// Options.MaxBatch of them (default 64; 1 gives every call its own
// transaction). The calls of a batch run one after another in queue
// order, each on its caller's goroutine and in its own SAVEPOINT, so a
// failing call rolls back only its own work, and each sees the
// uncommitted writes of the calls before it: the outcome is that of
// running them serially in that order. A duplicate of a scope claimed
// earlier in the same batch gets the verdict on that (uncommitted)
// record. No call of a batch returns a verdict before the batch's COMMIT
// has succeeded: if it fails, every call that was to be acknowledged —
// Execute or a verdict — gets the commit's error instead
// (registry.ErrUnavailable for a busy database or a closed Store).
// SQLite rolls back a whole transaction on some errors (an interrupted
// write, SQLITE_FULL, IOERR, a trigger's RAISE(ROLLBACK)); then no call
// of the batch is acknowledged, and the calls not yet run fail without
// running, with an error wrapping registry.ErrUnavailable.
//
// ctx governs the wait in the queue: a call whose ctx ends before its
// turn returns ctx's error and writes nothing. fn gets ctx; the Tx it
// gets refuses statements once ctx has ended but does not interrupt a
// running one (an interrupted write would roll back the whole batch:
// Native's *sql.Tx has no such protection). ctx is checked again before
// the outcome is recorded; the claim and the record statements and the
// wait for the COMMIT are not interrupted by ctx. fn must not call
// ExecuteOnce or Close of the same Store: both would wait for fn's own
// batch (a nested ExecuteOnce until its ctx ends).
func (s *Store) ExecuteOnce(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Result{}, err
	}
	if s.group != nil {
		return s.group.execute(ctx, c, fn)
	}
	return s.executeAlone(ctx, c, fn)
}

// executeAlone is ExecuteOnce without batching (Options.MaxBatch 1): one
// transaction of its own, begun and governed by ctx, fn included.
func (s *Store) executeAlone(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	octx, o := ownedtx.Context(ctx)
	tx, err := s.db.BeginTx(octx, nil)
	if err != nil {
		return registry.Result{}, s.fail("execute once", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, or after ClaimAndExecute rolled back, a no-op
	c.MaxActive = 0
	res, err := s.ClaimAndExecute(ctx, tx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		// The claim is never seen as RESERVED: for fn, and for the
		// outcomes it may return, the operation is executing.
		rec.State = idem.StateExecuting
		out, err := fn(ctx, tx, rec)
		if err == nil && !out.State.Terminal() {
			err = fmt.Errorf("idemsqlite: execute once: outcome state %q is not terminal", out.State)
		}
		return out, err
	})
	if err != nil || res.Verdict != registry.Execute {
		return res, err
	}
	if err := ownedtx.Commit(tx, o); err != nil {
		return registry.Result{}, s.fail("execute once", err)
	}
	return res, nil
}
