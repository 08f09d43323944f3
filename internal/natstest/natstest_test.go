package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/natstest"
)

// TestJetStreamSurvivesKill: a message published to a JetStream stream
// and acknowledged by the server is delivered after the server was
// killed with SIGKILL and restarted on the same port and store.
func TestJetStreamSurvivesKill(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "orders.new", []byte("order-1")); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("after the restart: %v\n%s", err, s.Log())
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil || string(msg.Data()) != "order-1" {
		t.Fatalf("after the restart: %v %v", msg, err)
	}
}
