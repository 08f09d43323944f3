package operation

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// Tracing (docs/tracing.md). A run is the span idem.run, started with
// Core.TracerProvider (nil: otel.GetTracerProvider()) as a child of the
// span in the request's context, if any. Its steps are its children:
// idem.reserve (two-phase acceptance point), idem.claim (one-transaction
// lookup), idem.execute, idem.replay, idem.effect.begin,
// idem.downstream.send and idem.downstream.lookup, idem.settle and
// idem.takeover. A step's span is started only when its parent records,
// so an untraced request allocates nothing for them. Attributes: the
// operation's name, the outcome, the state, the owner generation, a
// refusal's contract code and, on idem.run, idem.cached when the replay
// cache answered (a replay or a conflict) without a registry read —
// never a key, a scope, a body, an identity, a downstream key or an
// operation ID.

// Span names.
const (
	SpanRun          = "idem.run"
	SpanReserve      = "idem.reserve"
	SpanClaim        = "idem.claim"
	SpanExecute      = "idem.execute"
	SpanReplay       = "idem.replay"
	SpanEffectBegin  = "idem.effect.begin"
	SpanSettle       = "idem.settle"
	SpanTakeOver     = "idem.takeover"
	SpanDownstream   = "idem.downstream.send"   // effect.Send
	SpanDownstreamLk = "idem.downstream.lookup" // effect.Operation.Lookup
)

// ReservationObserver is an Observer that takes the reservation latency
// with the run's context, for example to attach the trace as an
// exemplar; ObserveReservationContext is then called instead of
// ObserveReservation.
type ReservationObserver interface {
	ObserveReservationContext(ctx context.Context, operation string, d time.Duration)
}

// observeReservation hands d to the Observer, with ctx when it takes it.
func (c *Core) observeReservation(ctx context.Context, d time.Duration) {
	if ro, ok := c.Observer.(ReservationObserver); ok {
		ro.ObserveReservationContext(ctx, c.name(), d)
		return
	}
	c.obs().ObserveReservation(c.name(), d)
}

// startRun starts the run's span (idem.run).
func (c *Core) startRun(ctx context.Context) (context.Context, trace.Span) {
	ctx, span := tracing.Root(ctx, c.TracerProvider, SpanRun)
	if span.IsRecording() {
		span.SetAttributes(tracing.Operation.String(c.name()))
	}
	return ctx, span
}

// markCached marks the run's span (in ctx) as answered from the replay
// cache: the run then has no idem.claim or idem.reserve span, since the
// registry was not read. Nothing is built for a span that does not
// record (the replay path is measured).
func markCached(ctx context.Context) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.Cached.Bool(true))
	}
}

// endRun ends the run's span with what the run answered, and returns
// res. A replay gets its own child span, idem.replay.
func (c *Core) endRun(ctx context.Context, span trace.Span, res Result) Result {
	if !span.IsRecording() {
		return res
	}
	outcome := [...]string{Executed: "executed", Replayed: "replayed", Released: "released", Refused: "refused", Plain: "plain"}[res.Kind]
	span.SetAttributes(tracing.Outcome.String(outcome))
	if res.Record.State != "" {
		span.SetAttributes(tracing.State.String(string(res.Record.State)), tracing.Generation.Int64(res.Record.OwnerGen))
	}
	if res.Kind == Refused {
		span.SetAttributes(tracing.Code.String(string(res.Refusal.Code)))
	}
	if res.Kind == Replayed {
		_, rs := c.span(ctx, SpanReplay, res.Record)
		rs.SetAttributes(tracing.State.String(string(res.Record.State)))
		rs.End()
	}
	span.End()
	return res
}

// span starts the child span name of one step on rec (its generation
// when it has one).
func (c *Core) span(ctx context.Context, name string, rec registry.Record) (context.Context, trace.Span) {
	ctx, span := tracing.Child(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(tracing.Operation.String(c.name()))
		if rec.OwnerGen != 0 {
			span.SetAttributes(tracing.Generation.Int64(rec.OwnerGen))
		}
	}
	return ctx, span
}

// endSpan ends a step's span with the record it ended with and its
// error: the state, the generation, and an error status without its text
// (an error may quote a key or a statement's arguments).
func endSpan(span trace.Span, rec registry.Record, err error) {
	if !span.IsRecording() {
		return
	}
	if rec.State != "" {
		span.SetAttributes(tracing.State.String(string(rec.State)), tracing.Generation.Int64(rec.OwnerGen))
	}
	tracing.Fail(span, err)
	span.End()
}

// endTakeOver ends idem.takeover: the generation taken over from and the
// new one, or why not.
func endTakeOver(span trace.Span, from, mine registry.Record, err error) {
	if span.IsRecording() {
		span.SetAttributes(tracing.PreviousGeneration.Int64(from.OwnerGen))
		if err != nil {
			span.SetAttributes(tracing.Outcome.String(takeOverOutcome(err)))
		}
	}
	endSpan(span, mine, err)
}

func takeOverOutcome(err error) string {
	if errors.Is(err, registry.ErrFenced) {
		return "fenced" // finished meanwhile, or taken over by another
	}
	return "error"
}
