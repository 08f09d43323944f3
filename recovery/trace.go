package recovery

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// Span names of the worker (docs/tracing.md). Each record the worker
// handles is a root span of its own: the span context of the owner whose
// lease expired is not stored with its record, so there is no trace to
// continue. Attributes: the operation's name, the generations, the
// outcome — never an operation ID, a key or a body.
const (
	SpanTakeOver = "idem.recovery.takeover"
	SpanSettle   = "idem.recovery.settle"
)

// start starts the root span name for rec with w.TracerProvider.
func (w *Worker) start(ctx context.Context, name string, rec registry.Record) (context.Context, trace.Span) {
	ctx, span := tracing.Root(ctx, w.TracerProvider, name)
	if span.IsRecording() {
		span.SetAttributes(tracing.Operation.String(rec.Operation), tracing.Generation.Int64(rec.OwnerGen))
	}
	return ctx, span
}

// handleTraced is handle in the span idem.recovery.takeover: outcome
// recovered (the owner had committed), unknown (taken over and marked
// UNKNOWN: generation + 1), error, or skipped (released, finished or
// taken by another meanwhile).
func (w *Worker) handleTraced(ctx context.Context, listed registry.Record) (Report, error) {
	ctx, span := w.start(ctx, SpanTakeOver, listed)
	defer span.End()
	rep, err := w.handle(ctx, listed)
	if span.IsRecording() {
		outcome := "skipped"
		switch {
		case err != nil:
			outcome = "error"
			tracing.Fail(span, err)
		case rep.Recovered > 0:
			outcome = "recovered"
		case rep.Unknown > 0:
			outcome = "unknown"
			span.SetAttributes(tracing.PreviousGeneration.Int64(listed.OwnerGen), tracing.Generation.Int64(listed.OwnerGen+1),
				tracing.State.String("UNKNOWN"))
		}
		span.SetAttributes(tracing.Outcome.String(outcome))
	}
	return rep, err
}

// endSettle ends idem.recovery.settle: outcome reconciled (settled on
// evidence by this call), settled (by someone else), unsettled or error.
func endSettle(span trace.Span, s effect.Settlement, err error) {
	if span.IsRecording() {
		outcome := "unsettled"
		switch {
		case err != nil:
			outcome = "error"
			tracing.Fail(span, err)
		case s.Settled && s.Method != "":
			outcome = "reconciled"
		case s.Settled:
			outcome = "settled"
		}
		span.SetAttributes(tracing.Outcome.String(outcome))
		if s.Settled {
			span.SetAttributes(tracing.State.String(string(s.Record.State)))
		}
	}
	span.End()
}
