package outbox

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// Span names of the relay (docs/tracing.md).
const (
	// SpanDeliver is one delivery attempt of one message (a Deliverer's
	// Deliver), a child of the span that recorded the message
	// (registry.OutboxMessage.Trace): the delivery continues the
	// request's trace, however much later it happens.
	SpanDeliver = "idem.outbox.deliver"
	// SpanPublish is one batch handed to a Publisher that is not a
	// Deliverer, linked to the trace of each of its messages.
	SpanPublish = "idem.outbox.publish"
)

// MessageContext returns ctx continuing the trace m was recorded in: the
// span context its stored traceparent (m.Trace) names becomes ctx's
// remote parent. ctx is returned as it is when m has none. A Publisher
// that sends a batch injects each message's trace context from it.
func MessageContext(ctx context.Context, m registry.OutboxMessage) context.Context {
	return tracing.Continue(ctx, m.Trace)
}

// startDelivery starts idem.outbox.deliver for m.
func (r *Relay) startDelivery(ctx context.Context, m registry.OutboxMessage) (context.Context, trace.Span) {
	ctx, span := tracing.Root(MessageContext(ctx, m), r.TracerProvider, SpanDeliver, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(tracing.Topic.String(m.Topic), tracing.Attempt.Int(m.Attempts+1))
	}
	return ctx, span
}

// startPublish starts idem.outbox.publish for msgs, linked to each
// message's trace.
func (r *Relay) startPublish(ctx context.Context, msgs []registry.OutboxMessage) (context.Context, trace.Span) {
	var links []trace.Link
	for _, m := range msgs {
		if sc := trace.SpanContextFromContext(MessageContext(context.Background(), m)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, span := tracing.Root(ctx, r.TracerProvider, SpanPublish, trace.WithLinks(links...), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(tracing.Messages.Int(len(msgs)))
	}
	return ctx, span
}

// endDelivery ends a delivery's or a batch's span: outcome delivered or
// failed (the error's kind, never its text).
func endDelivery(span trace.Span, err error) {
	if span.IsRecording() {
		outcome := "delivered"
		if err != nil {
			outcome = "failed"
		}
		span.SetAttributes(tracing.Outcome.String(outcome))
		tracing.Fail(span, err)
	}
	span.End()
}
