package tracing

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/registry"
)

// TestUntracedAllocatesNothing: with no tracer provider passed and none
// set globally (this test binary sets none), starting a run's span and
// its steps' spans, stamping outbox messages, extracting nothing and
// observing a histogram allocate nothing and start no span — the cost an
// application that does not trace pays on every request.
func TestUntracedAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	msgs := []registry.Message{{Topic: "t"}}
	allocs := testing.AllocsPerRun(1000, func() {
		rctx, run := Root(ctx, nil, "idem.run")
		sctx, step := Child(rctx, "idem.reserve")
		if run.IsRecording() || step.IsRecording() {
			t.Fatal("an untraced run recorded a span")
		}
		Stamp(sctx, msgs)
		Observe(sctx, h, 0.001)
		step.End()
		run.End()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per untraced run, want 0", allocs)
	}
	if msgs[0].Trace != "" {
		t.Errorf("an untraced message was stamped %q", msgs[0].Trace)
	}
}

// TestStampContinue: a message stamped in a traced context carries that
// span's W3C traceparent, and Continue makes it the remote parent of a
// delivery; a message that already has one keeps it.
func TestStampContinue(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	ctx, span := Root(context.Background(), tp, "idem.execute")
	defer span.End()
	msgs := []registry.Message{{Topic: "a"}, {Topic: "b", Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	Stamp(ctx, msgs)
	sc := span.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; msgs[0].Trace != want {
		t.Errorf("stamped %q, want %q", msgs[0].Trace, want)
	}
	if msgs[1].Trace != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("a message's own trace was replaced: %q", msgs[1].Trace)
	}
	dctx, delivery := Root(Continue(context.Background(), msgs[0].Trace), tp, "idem.outbox.deliver")
	delivery.End()
	if delivery.SpanContext().TraceID() != sc.TraceID() {
		t.Errorf("the delivery is in trace %s, want %s", delivery.SpanContext().TraceID(), sc.TraceID())
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(dctx, c)
	if c["traceparent"] == msgs[0].Trace || c["traceparent"] == "" {
		t.Errorf("the delivery sends %q: want its own span's traceparent", c["traceparent"])
	}
	if Continue(context.Background(), "not a traceparent") != context.Background() {
		t.Errorf("Continue of garbage changed the context")
	}
}
