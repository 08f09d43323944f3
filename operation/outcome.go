package operation

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
)

// Recording an execution's outcome, for every style: what a run answers
// once its outcome is committed or failed to commit (answer), releasing
// a reservation, reading the record again after a write whose commit
// reply was lost (settled, resolve), and the context an accepted
// execution runs under, whose heartbeat keeps its lease
// (executionContext).

// answer is what an execution under rec ended with: once its outcome is
// committed (done), Executed; when nothing may be recorded (ErrRelease),
// Released; else a refusal (afterFailedComplete). reserved says that rec
// was reserved beforehand (two-phase), so an execution that recorded
// nothing releases it; a one-transaction execution has nothing to
// release. When recording failed for a reason that is not storage
// trouble and a statement of the execution had failed (ans.Failed), the
// failed statement is why (handlerFailed).
func (c *Core) answer(ctx context.Context, rec, done registry.Record, err error, ans Answer, reserved bool) Result {
	if err == nil {
		err = failpoint.Hit(failpoint.AfterCommit) // the outcome is committed either way
	}
	switch {
	case err == nil:
		c.obs().Outcome(c.name(), "executed")
		c.log().Info("operation executed", "operation", c.name(), "operation_id", done.OperationID, "state", done.State, "status", ans.Status)
		return Result{Kind: Executed, Record: done}
	case errors.Is(err, ErrRelease):
		if reserved {
			c.release(ctx, rec)
		}
		c.obs().Outcome(c.name(), "released")
		return Result{Kind: Released}
	case errors.Is(err, ErrTooLarge):
		if reserved {
			c.release(ctx, rec)
		}
		return Result{Kind: Refused, Refusal: Refusal{Code: CodeResponseTooLarge, Detail: "the response exceeds the size that can be stored for replay"}}
	case ans.Failed != nil && !storageTrouble(err):
		return c.handlerFailed(ctx, rec, err, ans, reserved)
	default:
		return c.afterFailedComplete(ctx, rec, err, reserved)
	}
}

// handlerFailed answers an execution whose outcome could not be recorded
// because a statement of the execution failed (ans.Failed) — on
// PostgreSQL the failed statement aborted the business transaction, so
// nothing it wrote, nor its outcome, could commit (err). That is the
// execution's error, never storage trouble: a reservation is released
// and the key is free again; a 4xx it answered is sent as it is
// (Released: not stored, so a retry executes afresh); any other answer
// claimed an outcome that did not commit, and is refused HANDLER_ERROR.
func (c *Core) handlerFailed(ctx context.Context, rec registry.Record, err error, ans Answer, reserved bool) Result {
	c.log().Error("a statement of the handler failed, so its transaction could not commit; nothing was recorded",
		"operation", c.name(), "operation_id", rec.OperationID, "status", ans.Status, "statement_err", ans.Failed, "err", err)
	if reserved {
		c.release(ctx, rec)
	}
	if ans.Status >= 400 && ans.Status < 500 {
		c.obs().Outcome(c.name(), "released")
		return Result{Kind: Released}
	}
	return Result{Kind: Refused, Refusal: Refusal{Code: CodeHandlerError, Detail: "a statement of the handler failed and its transaction could not commit; nothing was recorded"}}
}

// afterFailedComplete handles a Complete (or ExecuteOnce) that failed for
// a reason other than the execution: fenced, or storage trouble —
// possibly after the commit reached the database (a lost commit reply).
// The record is read again: if the outcome is there it is replayed;
// otherwise a reservation (reserved) is released if still ours, and the
// request is refused STORE_UNAVAILABLE (fail closed).
func (c *Core) afterFailedComplete(ctx context.Context, rec registry.Record, err error, reserved bool) Result {
	c.log().Error("recording the outcome failed", "operation", c.name(), "operation_id", rec.OperationID, "err", err)
	if now, ok := c.resolve(ctx, rec, err); ok { // settle.go
		return Result{Kind: Replayed, Record: now}
	}
	if errors.Is(err, registry.ErrTenantMoved) {
		// Nothing committed, and nothing of the tenant may be written
		// here any more, a release neither: the record stays as it was.
		return Result{Kind: Refused, err: err}
	}
	if reserved && !errors.Is(err, registry.ErrFenced) {
		c.release(ctx, rec)
	}
	if errors.Is(err, registry.ErrWriterFenced) {
		return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeWriterFenced, Detail: "this server's writer epoch is no longer current; retry with the same key"}}
	}
	c.obs().Outcome(c.name(), "store_error")
	return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeStoreUnavailable, Detail: "the outcome could not be recorded; retry with the same key"}}
}

func (c *Core) release(ctx context.Context, rec registry.Record) {
	if err := c.Store.Release(ctx, rec); err != nil && !errors.Is(err, registry.ErrFenced) {
		// The lease will expire and recovery will release it.
		c.log().Error("release failed", "operation_id", rec.OperationID, "err", err)
	}
}

// storageTrouble reports whether err, a failure to record an outcome,
// means the store could not be reached or answered in time, or fenced
// the write: the failures that are not the execution's.
func storageTrouble(err error) bool {
	return errors.Is(err, registry.ErrUnavailable) || errors.Is(err, registry.ErrFenced) ||
		errors.Is(err, registry.ErrWriterFenced) || errors.Is(err, registry.ErrTenantMoved) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// settled reads rec's scope again and reports whether the same operation
// now holds a terminal outcome: after a failed Complete (possibly a lost
// commit reply) or a lost race to Reconcile, that outcome is replayed.
// A failed read counts as not settled; a rec without an operation ID (a
// one-transaction execution that failed before it ran) has nothing to
// read.
func (c *Core) settled(ctx context.Context, rec registry.Record) (registry.Record, bool) {
	if rec.OperationID == "" {
		return registry.Record{}, false
	}
	now, err := c.Store.Get(ctx, rec.Scope)
	if err != nil || !finished(now, rec) {
		return registry.Record{}, false
	}
	return now, true
}

// finished reports whether now, the record read for rec's scope, is
// rec's operation in a terminal state: its outcome was committed.
func finished(now, rec registry.Record) bool {
	return now.OperationID == rec.OperationID && now.State.Terminal()
}

// resolve is settled after a write that failed with failed. When the store
// could not be reached (registry.ErrUnavailable: the connection died, maybe
// around COMMIT, or the primary is failing over) the write's outcome is
// unknown, and the one thing that can tell is the record itself: resolve
// then keeps reading it, backing off, until the store answers or
// ResolveWait passes — independent of ctx's cancellation, so a client that
// hung up does not cut it short. A terminal record of the same operation
// is the committed outcome; anything else (no record, another operation,
// not terminal, no answer in time) is not settled, and the caller answers
// as it would have: nothing is executed again here.
func (c *Core) resolve(ctx context.Context, rec registry.Record, failed error) (registry.Record, bool) {
	if rec.OperationID == "" || !errors.Is(failed, registry.ErrUnavailable) || c.resolveWait() == 0 {
		return c.settled(ctx, rec)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.resolveWait())
	defer cancel()
	c.log().Warn("the outcome's commit is unknown: reading the record until the store answers",
		"operation", c.name(), "operation_id", rec.OperationID, "wait", c.resolveWait())
	delay := resolvePollStart
	for {
		now, err := c.Store.Get(ctx, rec.Scope)
		if err == nil || !errors.Is(err, registry.ErrUnavailable) {
			ok := err == nil && finished(now, rec)
			c.log().Info("the outcome's commit resolved by reading the record",
				"operation", c.name(), "operation_id", rec.OperationID, "committed", ok)
			if !ok {
				return registry.Record{}, false
			}
			return now, true
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return registry.Record{}, false
		}
		delay = min(2*delay, resolvePollMax)
	}
}

// executionContext returns the context an accepted execution runs under:
// not cancelled when the request's ctx ends (A8), and bounded by the
// operation's MaxDuration (by default its lease), with rec's lease kept
// by heartbeat. The returned stop function ends the heartbeat and
// releases the context.
func (c *Core) executionContext(ctx context.Context, rec registry.Record) (context.Context, func()) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Config.ExecutionLimit())
	stop := c.heartbeat(ctx, rec)
	return ctx, func() { cancel(); stop() }
}

// heartbeat keeps rec's lease while ctx lasts: when MaxDuration exceeds
// the lease, it extends the lease every third of it, so recovery never
// takes over a live execution; if the heartbeat is fenced (the record
// moved on), it stops and the execution's own commit will be fenced too.
// The returned function waits for the heartbeat to end: call it only
// once ctx is done.
func (c *Core) heartbeat(ctx context.Context, rec registry.Record) (wait func()) {
	lease := registry.LeaseOrDefault(c.Config.Lease)
	if c.Config.ExecutionLimit() <= lease {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := c.Store.ExtendLease(ctx, rec, lease)
			switch {
			case errors.Is(err, registry.ErrFenced):
				c.log().Warn("lease heartbeat fenced", "operation", c.name(), "operation_id", rec.OperationID)
				return
			case err != nil && ctx.Err() == nil:
				c.log().Error("lease heartbeat failed", "operation", c.name(), "operation_id", rec.OperationID, "err", err)
			}
		}
	})
	return wg.Wait
}
