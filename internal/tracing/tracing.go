// Package tracing holds what idem's packages share to trace with
// OpenTelemetry: the instrumentation scope, the attribute keys, the start
// of a child span, the propagator in use, and the exemplar of a
// Prometheus observation. Only the OpenTelemetry API is used here; the
// application chooses the SDK, the exporter and the sampler, and passes
// its TracerProvider (nil: otel.GetTracerProvider(), a no-op until the
// application sets one).
//
// What is never put on a span: an idempotency key, a scope hash, a
// request or response body, an identity (tenant, principal), a
// downstream key or an operation ID. The attributes are the operation's
// name, the outcome, the state, the owner generation and a contract code
// (docs/tracing.md).
package tracing

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/registry"
)

// Scope is the instrumentation scope of every span idem starts.
const Scope = "github.com/idemkit/idem"

// Attribute keys (docs/tracing.md).
const (
	Operation  = attribute.Key("idem.operation")  // the operation's configured name
	Outcome    = attribute.Key("idem.outcome")    // executed, replayed, released, refused, plain, …
	State      = attribute.Key("idem.state")      // the record's state
	Generation = attribute.Key("idem.generation") // the owner generation (1 for the first owner)
	// PreviousGeneration is the generation a takeover took the operation
	// from (the owner whose lease expired).
	PreviousGeneration = attribute.Key("idem.previous_generation")
	Code               = attribute.Key("idem.code")     // the contract code of a refusal
	Effect             = attribute.Key("idem.effect")   // the effect's declared name (not its key)
	Answer             = attribute.Key("idem.answer")   // a downstream answer's kind: executed, declined, not found, indefinite
	Topic              = attribute.Key("idem.topic")    // an outbox message's topic
	Attempt            = attribute.Key("idem.attempt")  // the delivery attempt of an outbox message (1 for the first)
	Messages           = attribute.Key("idem.messages") // how many messages a batch publish carried
	Cached             = attribute.Key("idem.cached")   // true on a run the in-process replay cache answered (a replay or a conflict), without a registry read
)

// Tracer returns the tracer of tp, or of otel.GetTracerProvider() when tp
// is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Scope)
}

// unset is the global TracerProvider before the application sets one:
// it delegates to nothing, so a run under it is not traced.
var unset = otel.GetTracerProvider()

// Root starts the span name with tp (nil: otel.GetTracerProvider()), as
// a child of ctx's span if any, with opts. While tp is nil and the
// application has set no global provider, the span is started with the
// provider of ctx's span when that span records (another
// instrumentation's), and otherwise nothing is started or allocated:
// ctx and its span are returned.
func Root(ctx context.Context, tp trace.TracerProvider, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if tp == nil {
		tp = otel.GetTracerProvider()
		if tp == unset {
			parent := trace.SpanFromContext(ctx)
			if !parent.IsRecording() {
				return ctx, parent
			}
			tp = parent.TracerProvider()
		}
	}
	return tp.Tracer(Scope).Start(ctx, name, opts...)
}

// Fail marks span failed when err is not nil, with a fixed description
// of the kind of failure but never the error's text: an error may quote
// a key, a statement's arguments or a downstream's answer.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	what := "error"
	switch {
	case errors.Is(err, registry.ErrUnavailable):
		what = "storage unavailable"
	case errors.Is(err, registry.ErrFenced):
		what = "fenced"
	case errors.Is(err, registry.ErrNotFound):
		what = "not found"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		what = "context ended"
	}
	span.SetStatus(codes.Error, what)
}

// Child starts the span name as a child of ctx's span, with the tracer
// provider of that span, when that span is recording; otherwise it
// returns ctx and its span unchanged and allocates nothing: an untraced
// request costs a context lookup. End the returned span in every case
// (ending a non-recording span does nothing).
func Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name, trace.WithAttributes(attrs...))
}

// Propagator returns p, or otel.GetTextMapPropagator() when p is nil (a
// no-op until the application sets one, for example
// propagation.TraceContext{} for W3C traceparent).
func Propagator(p propagation.TextMapPropagator) propagation.TextMapPropagator {
	if p == nil {
		return otel.GetTextMapPropagator()
	}
	return p
}

// Stamp sets the Trace of each message of msgs that has none to the
// W3C traceparent of ctx's span, when ctx holds a valid span context
// (sampled or not), so that the message's delivery continues that trace;
// otherwise it changes nothing and allocates nothing.
func Stamp(ctx context.Context, msgs []registry.Message) {
	if len(msgs) == 0 || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	tp := Traceparent(ctx)
	for i := range msgs {
		if msgs[i].Trace == "" {
			msgs[i].Trace = tp
		}
	}
}

// Traceparent is the W3C traceparent of ctx's span context, "" when it
// is not valid.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// Continue returns ctx with the span context the W3C traceparent tp
// names as its remote parent, or ctx unchanged when tp is not one.
func Continue(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Observe records v in o, with an exemplar carrying the trace_id of ctx's
// span when that span is sampled and o takes exemplars
// (prometheus.ExemplarObserver: a histogram does); else a plain
// observation.
func Observe(ctx context.Context, o prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(v)
}
