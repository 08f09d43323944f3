package idemmysql

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/ownedtx"
	"github.com/idemkit/idem/registry"
)

// ExecuteOnce is the one-transaction style (registry.Store.ExecuteOnce):
// the claim of c's scope, fn, and its outcome and outbox rows, recorded
// exactly as ClaimAndExecute does, commit together and durably, or not at
// all. The claim insert is the acceptance point: a concurrent call for
// the same scope waits at its insert for this transaction to end, and
// then meets the committed record (its verdict is returned with a nil
// error, fn not called) or, after a rollback, inserts its own. Under READ
// COMMITTED no other transaction reads the record before it is terminal.
// fn gets it as EXECUTING. An error from fn, an outcome that is not
// terminal, or an error recording it rolls back and is returned (fn's
// error unchanged). c.MaxActive does not apply.
//
// A deadlock at the claim insert (InnoDB's lock upgrade between waiters
// of a rolled-back claim; nothing ran yet) begins again, up to
// deadlockAttempts times; a deadlock after fn ran is returned, wrapping
// registry.ErrUnavailable, with everything rolled back. ctx governs the
// whole call, fn included.
func (s *Store) ExecuteOnce(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Result{}, err
	}
	c.MaxActive = 0
	for attempt := 1; ; attempt++ {
		res, err, retry := s.executeOnce(ctx, c, fn)
		if !retry || attempt == deadlockAttempts {
			return res, err
		}
		deadlockPause(ctx, attempt)
	}
}

// executeOnce is one attempt of ExecuteOnce; retry reports a deadlock at
// the claim insert, before fn ran.
func (s *Store) executeOnce(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (_ registry.Result, _ error, retry bool) {
	octx, o := ownedtx.Context(ctx)
	tx, err := s.db.BeginTx(octx, nil)
	if err != nil {
		return registry.Result{}, s.fail("execute once", err), false
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, or after a lost claim, a no-op
	rec, insErr := s.claimInsert(ctx, tx, c)
	if insErr != nil {
		_ = tx.Rollback()
		if isDeadlock(insErr) {
			return registry.Result{}, s.fail("execute once", insErr), true
		}
		existing, err := s.Get(ctx, c.Scope)
		res, err := s.lostClaim(c, insErr, existing, err)
		return res, err, false
	}
	// The claim is never seen as RESERVED: for fn, and for the outcomes
	// it may return, the operation is executing.
	// The record is stored as RESERVED until the compare-and-set below,
	// which moves it straight to the outcome's state.
	seen := rec
	seen.State = idem.StateExecuting
	out, err := fn(ctx, sqlTx{tx}, seen)
	if err != nil {
		return registry.Result{}, err, false
	}
	if !out.State.Terminal() {
		return registry.Result{}, fmt.Errorf("idemmysql: execute once: outcome state %q is not terminal", out.State), false
	}
	done, err := s.record(ctx, tx, rec, out)
	if err != nil {
		return registry.Result{}, err, false
	}
	if err := ownedtx.Commit(tx, o); err != nil {
		return registry.Result{}, s.fail("execute once", err), false
	}
	return registry.Result{Verdict: registry.Execute, Record: done}, nil, false
}
