package rabbittest_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/internal/rabbittest"
)

func TestMain(m *testing.M) { rabbittest.Main(m) }

// TestBrokerRedelivers: a message the consumer received but did not
// acknowledge before its channel closed is delivered again, marked
// redelivered — the behaviour a consumer's crash between its commit and
// its ack meets.
func TestBrokerRedelivers(t *testing.T) {
	url := rabbittest.URL(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare(t.Name(), true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{MessageId: "m-1", Body: []byte("order-1")}); err != nil {
		t.Fatal(err)
	}
	first, err := ch.ConsumeWithContext(ctx, q.Name, "first", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := <-first
	if d.Redelivered || d.MessageId != "m-1" {
		t.Fatalf("first delivery: %+v", d)
	}
	ch.Close() // without an ack
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ch2.ConsumeWithContext(ctx, q.Name, "second", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-again:
		if !d.Redelivered || d.MessageId != "m-1" || string(d.Body) != "order-1" {
			t.Fatalf("redelivery: %+v", d)
		}
		d.Ack(false)
	case <-ctx.Done():
		t.Fatal("no redelivery")
	}
}
