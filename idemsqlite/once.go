package idemsqlite

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// ExecuteOnce is the one-transaction style (registry.Store.ExecuteOnce):
// one BEGIN IMMEDIATE transaction claims c's scope, runs fn, records its
// outcome and outbox rows exactly as ClaimAndExecute does, and commits
// durably. SQLite's single writer makes the claim exact: a concurrent
// call waits for the write lock and then meets the committed record (its
// verdict is returned with a nil error, nothing run), and no other
// connection ever sees the record before it is terminal; fn gets it as
// EXECUTING. An error from fn, an outcome that is not terminal (SUCCEEDED,
// FAILED_FINAL, REJECTED), or an error recording it rolls everything back and is
// returned. c.MaxActive does not apply: nothing stays in flight. ctx
// governs the whole call, fn included.
func (s *Store) ExecuteOnce(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Result{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
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
	if err := tx.Commit(); err != nil {
		return registry.Result{}, s.fail("execute once", err)
	}
	return res, nil
}
