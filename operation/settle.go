package operation

import (
	"context"
	"errors"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Continuing an operation: a retry that finds its operation UNKNOWN, or
// in flight under an owner whose lease expired, continues that operation
// — the same operation ID, never a new one (SPEC E2–E3).

// ActorClientRetry is the reconciliation actor of a settlement made while
// answering a client's retry.
const ActorClientRetry = "client retry"

// settleUnknown answers a same-fingerprint retry of an UNKNOWN
// effect-bearing operation: it tries to settle the operation on evidence
// (effect.Operation.Settle: a lookup by the downstream key, then a re-send
// of the stored request with the same key) and replays the rendered
// outcome if that worked; otherwise the operation stays UNKNOWN and the
// request is refused OUTCOME_UNKNOWN again. Storage trouble refuses
// STORE_UNAVAILABLE. ctx is the request's.
func (c *Core) settleUnknown(ctx context.Context, rec registry.Record) Result {
	xctx, stop := c.executionContext(ctx, rec)
	defer stop()
	xctx, span := c.span(xctx, SpanSettle, rec) // trace.go
	defer span.End()
	s, err := c.Config.Effects.Settle(xctx, c.Store, rec, ActorClientRetry)
	switch {
	case err != nil && errors.Is(err, registry.ErrUnavailable):
		return Result{Kind: Refused, err: err}
	case err != nil:
		c.log().Error("settling an unknown operation failed", "operation", c.name(), "operation_id", rec.OperationID, "err", err)
		return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeOutcomeUnknown, OperationID: rec.OperationID, Monitor: true}}
	case s.Settled:
		if s.Method != "" {
			c.obs().Outcome(c.name(), "reconciled")
			c.log().Info("unknown operation settled on evidence", "operation", c.name(), "operation_id", rec.OperationID,
				"state", s.Record.State, "method", s.Method, "actor", ActorClientRetry)
		}
		return Result{Kind: Replayed, Record: s.Record}
	}
	c.log().Info("unknown operation not settled", "operation", c.name(), "operation_id", rec.OperationID, "reason", s.Reason)
	return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeOutcomeUnknown, OperationID: rec.OperationID, Monitor: true}}
}

// takeOver gives an in-flight operation whose owner's lease expired to
// this request (Store.TakeOver: owner generation + 1, same operation ID).
// The old owner's late writes are fenced from then on. It reports true
// when the request must now execute the operation itself: nothing was
// committed and no effect outside the database was begun. An operation
// with a begun effect is never executed again: it is marked UNKNOWN and
// settled on evidence, as an UNKNOWN retry is. In every other case the
// Result answers the request.
func (c *Core) takeOver(ctx context.Context, rec registry.Record) (registry.Record, Result, bool) {
	tctx, span := c.span(ctx, SpanTakeOver, registry.Record{}) // trace.go
	mine, err := c.Store.TakeOver(tctx, rec, c.Config.Lease)
	endTakeOver(span, rec, mine, err)
	if errors.Is(err, registry.ErrFenced) {
		// Finished meanwhile, or another retry or the recovery worker
		// took it over: answer from the record as it is now.
		return registry.Record{}, c.answerCurrent(ctx, rec), false
	}
	if err != nil {
		return registry.Record{}, Result{Kind: Refused, err: err}, false
	}
	c.log().Warn("operation taken over from an owner whose lease expired", "operation", c.name(),
		"operation_id", mine.OperationID, "owner_gen", mine.OwnerGen, "state", mine.State)
	if c.Config.Effects == nil {
		return mine, Result{}, true
	}
	effs, err := c.Store.Effects(ctx, mine.OperationID)
	if err != nil {
		return registry.Record{}, Result{Kind: Refused, err: err}, false // ours until the new lease expires; the worker or a retry goes on
	}
	if len(effs) == 0 {
		return mine, Result{}, true
	}
	unk, err := c.Store.MarkUnknown(ctx, mine)
	if err != nil {
		return registry.Record{}, Result{Kind: Refused, err: err}, false
	}
	return registry.Record{}, c.settleUnknown(ctx, unk), false
}

// answerCurrent answers from the record of rec's scope as it is now: a
// replay when it is terminal, else refused as any in-flight operation.
func (c *Core) answerCurrent(ctx context.Context, rec registry.Record) Result {
	now, err := c.Store.Get(ctx, rec.Scope)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodeInProgress, Detail: "the operation is in progress"}}
	case err != nil:
		return Result{Kind: Refused, err: err}
	case now.Fingerprint != rec.Fingerprint:
		return Result{Kind: Refused, Refusal: Refusal{Code: idem.CodePayloadConflict, Detail: "the key was used for a different request"}}
	case now.State.Terminal():
		return Result{Kind: Replayed, Record: now}
	}
	code := idem.CodeInProgress
	if now.State == idem.StateUnknown {
		code = idem.CodeOutcomeUnknown
	}
	return Result{Kind: Refused, Refusal: Refusal{Code: code, OperationID: now.OperationID, Monitor: true}}
}
