package consumer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// ordersProcessor is a Processor whose handler inserts an order row per
// message in the business table orders; fail makes it fail.
func ordersProcessor(t *testing.T, dsn string, fail func(consumer.Message) bool) (*consumer.Processor, registry.Store) {
	t.Helper()
	st, err := idemstore.Open(context.Background(), dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return &consumer.Processor{Store: st, Operation: "orders.ingest", APIRevision: "v1", Source: idem.Identity{Principal: "shop"}, MaxAttempts: 3,
		Handler: func(ctx context.Context, tx registry.Tx, m consumer.Message) (consumer.Result, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, body) VALUES ($1, $2)`, m.Key, string(m.Body)); err != nil {
				return consumer.Result{}, err
			}
			if fail != nil && fail(m) {
				return consumer.Result{}, errors.New("the handler failed")
			}
			return consumer.Result{Answer: []byte(`{"ok":true}`)}, nil
		}}, st
}

// count counts the rows of the business table orders.
func count(t *testing.T, st registry.Store) int {
	t.Helper()
	var n int
	if err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProcessorOnce: a message executes once and is acknowledged; its
// redelivery is a replay, acknowledged without running the handler; the
// same key with another body, and a message without a key, go to the
// dead-letter path; a failing handler records nothing and is retried
// until MaxAttempts, then dead-lettered. On SQLite and PostgreSQL.
// threat:consumer-redelivery
func TestProcessorOnce(t *testing.T) {
	pgtest.EachDriver(t, "orders.db", func(t *testing.T, driver, dsn string) {
		ctx := context.Background()
		p, st := ordersProcessor(t, dsn, func(m consumer.Message) bool { return m.Key == "poison" })
		m := consumer.Message{Key: "order-1", Subject: "orders.new", Body: []byte(`{"sku":"A"}`), Attempt: 1}
		if d := p.Process(ctx, m); d.Action != consumer.Ack || d.Verdict != registry.Execute || d.OperationID == "" {
			t.Fatalf("first delivery: %+v", d)
		}
		m.Attempt = 2
		if d := p.Process(ctx, m); d.Action != consumer.Ack || d.Verdict != registry.Replay {
			t.Errorf("redelivery: %+v, want an acknowledged replay", d)
		}
		other := m
		other.Body = []byte(`{"sku":"B"}`)
		if d := p.Process(ctx, other); d.Action != consumer.DeadLetter || d.Verdict != registry.Conflict {
			t.Errorf("the key with another body: %+v, want the dead-letter path", d)
		}
		if d := p.Process(ctx, consumer.Message{Subject: "orders.new", Body: []byte(`{}`)}); d.Action != consumer.DeadLetter {
			t.Errorf("no key: %+v, want the dead-letter path", d)
		}
		for attempt := 1; attempt <= 3; attempt++ {
			d := p.Process(ctx, consumer.Message{Key: "poison", Subject: "orders.new", Body: []byte(`{}`), Attempt: attempt})
			want := consumer.Retry
			if attempt == 3 {
				want = consumer.DeadLetter
			}
			if d.Action != want {
				t.Errorf("poison, attempt %d: %+v, want %v", attempt, d, want)
			}
		}
		if n := count(t, st); n != 1 {
			t.Errorf("%d orders, want 1", n)
		}
	})
}
