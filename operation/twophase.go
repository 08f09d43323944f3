package operation

import (
	"context"
	"time"

	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// The two-phase style: the reservation commits first (the acceptance
// point), so duplicates see the operation in flight; the execution then
// runs in the fenced business transaction, which records its outcome
// (Store.Complete; what then is answered: outcome.go). An effect-bearing
// operation reserves the same way but executes without that transaction
// (effects.go).

// reserve runs the acceptance point, timing it and asking Admit first.
func (c *Core) reserve(ctx context.Context, cl registry.Claim) (registry.Record, bool, error) {
	start := time.Now()
	sctx, span := c.span(ctx, SpanReserve, registry.Record{}) // trace.go
	rec, created, err := c.Store.Reserve(sctx, cl)
	endSpan(span, rec, err)
	c.observeReservation(ctx, time.Since(start))
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

// execute runs d inside the fenced business transaction and records its
// outcome. Once here the request has crossed the acceptance point: the
// client going away no longer cancels it (A8); the operation's
// MaxDuration bounds it instead (executionContext).
func (c *Core) execute(ctx context.Context, rec registry.Record, d Door) Result {
	xctx, stop := c.executionContext(ctx, rec) // settle.go
	defer stop()
	c.obs().Inflight(c.name(), 1)
	defer c.obs().Inflight(c.name(), -1)
	xctx, span := c.span(xctx, SpanExecute, rec)
	var ans Answer
	done, err := c.Store.Complete(xctx, rec, c.business(d, &ans))
	endSpan(span, done, err)
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
		tracing.Stamp(ctx, a.Outbox) // each message carries this trace to its delivery
		return registry.Outcome{State: a.State, Response: a.Response, Outbox: a.Outbox}, nil
	}
}
