package jetstream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/internal/orderstest"
	cjs "github.com/idemkit/idem/consumer/jetstream"
	"github.com/idemkit/idem/internal/natstest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestJetStreamTraceparent: a message published with a W3C traceparent
// header (in lower case, as idem's relay and most producers write it) is
// processed in the producer's trace: the handler's context holds that
// trace's span context, as the remote parent the adapter extracted.
func TestJetStreamTraceparent(t *testing.T) {
	srv := natstest.Start(t)
	f := newFixture(t, srv.URL(), pgtest.DSN(t))
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	msg := &nats.Msg{Subject: "orders.new", Data: []byte(`{"n":1}`), Header: nats.Header{
		cjs.KeyHeader: {"order-traced"}, "traceparent": {"00-" + traceID + "-" + parent + "-01"}}}
	if _, err := f.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []trace.SpanContext
	p := orderstest.Processor(f.store, nil, nil)
	inner := p.Handler
	p.Handler = func(ctx context.Context, tx registry.Tx, m consumer.Message) (consumer.Result, error) {
		mu.Lock()
		seen = append(seen, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		return inner(ctx, tx, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cjs.Consume(ctx, f.cons, p, cjs.Config{JetStream: f.js, DeadLetterSubject: "dead.orders", Propagator: propagation.TraceContext{}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	f.drained(t, time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].TraceID().String() != traceID || seen[0].SpanID().String() != parent || !seen[0].IsRemote() {
		t.Errorf("the handler's span contexts %v; want one, remote, of trace %s span %s", seen, traceID, parent)
	}
}
