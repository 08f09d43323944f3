package effect

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/tracing"
)

// Span names of the downstream calls (docs/tracing.md).
const (
	SpanSend   = "idem.downstream.send"
	SpanLookup = "idem.downstream.lookup"
)

// Send sends request with key through d, the downstream of the effect
// named name, in the span idem.downstream.send when ctx's span records
// (the downstream then gets that span's context: an HTTP Downstream
// injects it as traceparent with its propagator). The span carries the
// effect's name and the answer's kind, never the key, the request or the
// answer's body.
func Send(ctx context.Context, d Downstream, name, key string, request []byte) Answer {
	ctx, span := tracing.Child(ctx, SpanSend, tracing.Effect.String(name))
	a := d.Send(ctx, key, request)
	endCall(span, a)
	return a
}

// lookup is d.Lookup of key in the span idem.downstream.lookup.
func lookup(ctx context.Context, d Downstream, name, key string) Answer {
	ctx, span := tracing.Child(ctx, SpanLookup, tracing.Effect.String(name))
	a := d.Lookup(ctx, key)
	endCall(span, a)
	return a
}

func endCall(span trace.Span, a Answer) {
	if span.IsRecording() {
		span.SetAttributes(tracing.Answer.String(a.Kind.String()))
	}
	span.End()
}
