package operation

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
)

// The two-phase style: the reservation commits first (the acceptance
// point), so duplicates see the operation in flight; the execution then
// runs in the fenced business transaction, which records its outcome
// (Store.Complete). An effect-bearing operation executes without that
// transaction instead (effects.go).

// reserve runs the acceptance point, timing it and asking Admit first.
func (c *Core) reserve(ctx context.Context, cl registry.Claim) (registry.Record, bool, error) {
	start := time.Now()
	rec, created, err := c.Store.Reserve(ctx, cl)
	c.obs().ObserveReservation(c.name(), time.Since(start))
	if err != nil || !created || c.Admit == nil {
		return rec, created, err
	}
	// Admission is checked after the reservation so that replays of
	// finished operations never depend on it; a refused reservation is
	// released at once.
	if aerr := c.Admit(ctx); aerr != nil {
		if rerr := c.Store.Release(context.WithoutCancel(ctx), rec); rerr != nil {
			c.log().Error("release after refused admission", "operation_id", rec.OperationID, "err", rerr)
		}
		return registry.Record{}, false, aerr
	}
	return rec, true, nil
}

// executeTracked runs execute registered in the Core's flights under
// scope, so that a duplicate arriving meanwhile waits for it (Run). If an
// execution of scope is still registered — one that released its
// reservation and has not returned yet — nothing is registered: this
// request's duplicates then get the two-phase answers (IN_PROGRESS, or a
// wait).
func (c *Core) executeTracked(ctx context.Context, scope idem.ScopeHash, rec registry.Record, d Door) Result {
	if done, leader := c.flights.lead(scope); leader {
		defer c.flights.land(scope, done)
	}
	return c.execute(ctx, rec, d)
}

// execute runs d inside the fenced business transaction and records its
// outcome. Once here the request has crossed the acceptance point: the
// client going away no longer cancels it (A8); the operation's
// MaxDuration bounds it instead (executionContext).
func (c *Core) execute(ctx context.Context, rec registry.Record, d Door) Result {
	if c.Config.Effects != nil {
		return c.executeEffects(ctx, rec, d) // effects.go: no business transaction
	}
	xctx, stop := c.executionContext(ctx, rec) // settle.go
	defer stop()
	c.obs().Inflight(c.name(), 1)
	defer c.obs().Inflight(c.name(), -1)
	var ans Answer
	done, err := c.Store.Complete(xctx, rec, c.business(d, &ans))
	return c.answer(xctx, rec, done, err, ans, true)
}

// business returns the business function that runs d in the business
// transaction, keeping what it answered in ans, and turns that into the
// outcome to record.
func (c *Core) business(d Door, ans *Answer) registry.BusinessFunc {
	return func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		a, err := d.Execute(ctx, tx, rec)
		*ans = a
		if err != nil {
			return registry.Outcome{}, err
		}
		if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
			return registry.Outcome{}, err
		}
		return registry.Outcome{State: a.State, Response: a.Response, Outbox: a.Outbox}, nil
	}
}

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
