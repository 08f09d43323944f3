package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/internal/orderstest"
	"github.com/idemkit/idem/consumer/rabbitmq"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/internal/rabbittest"
	"github.com/idemkit/idem/registry"
)

// TestRabbitTraceparent: a message published with a W3C traceparent
// header is processed in the producer's trace: the handler's context
// holds that trace's span context, as the remote parent the adapter
// extracted from the delivery's headers.
func TestRabbitTraceparent(t *testing.T) {
	f := newFixture(t, rabbittest.URL(t), t.Name(), pgtest.DSN(t))
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	conn, err := amqp.Dial(f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", f.queue, false, false, amqp.Publishing{
		Headers: amqp.Table{rabbitmq.KeyHeader: "order-traced", "traceparent": "00-" + traceID + "-" + parent + "-01"},
		Body:    []byte(`{"n":1}`), DeliveryMode: amqp.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
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
		rabbitmq.Consume(ctx, f.conn, p, rabbitmq.Config{Queue: f.queue, DeadLetterQueue: f.dead, Propagator: propagation.TraceContext{}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	f.drained(t, f.queue, 1, time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].TraceID().String() != traceID || seen[0].SpanID().String() != parent || !seen[0].IsRemote() {
		t.Errorf("the handler's span contexts %v; want one, remote, of trace %s span %s", seen, traceID, parent)
	}
}
