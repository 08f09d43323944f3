package consumer_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/internal/orderstest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestProcessorOnce: a message executes once and is acknowledged; its
// redelivery is a replay, acknowledged without running the handler; the
// same key with another body, and a message without a key, go to the
// dead-letter path; a failing handler records nothing and is retried
// until MaxAttempts, then dead-lettered. On SQLite and PostgreSQL.
// threat:consumer-redelivery
func TestProcessorOnce(t *testing.T) {
	pgtest.EachDriver(t, "orders.db", func(t *testing.T, driver, dsn string) {
		ctx := context.Background()
		st := orderstest.Open(t, dsn)
		p := orderstest.Processor(st, nil, func(m consumer.Message) bool { return m.Key == "poison" })
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
		if n := orderstest.Count(t, st); n != 1 {
			t.Errorf("%d orders, want 1", n)
		}
	})
}

// TestProcessorFailsClosed: with the registry unreachable a delivery is
// retried, never dead-lettered, however many deliveries it had — storage
// trouble is not the message's fault — and a Processor whose fields make
// no operation (no APIRevision) retries too rather than dead-letter
// messages it never looked at.
func TestProcessorFailsClosed(t *testing.T) {
	ctx := context.Background()
	st := orderstest.Open(t, "sqlite:"+filepath.Join(t.TempDir(), "orders.db"))
	p := orderstest.Processor(st, nil, nil)
	st.Close()
	m := consumer.Message{Key: "order-1", Subject: "orders.new", Body: []byte(`{"sku":"A"}`), Attempt: 10}
	if d := p.Process(ctx, m); d.Action != consumer.Retry || !strings.Contains(d.Reason, string(idem.CodeStoreUnavailable)) {
		t.Errorf("a delivery with the registry closed: %+v, want a Retry for STORE_UNAVAILABLE", d)
	}
	bad := orderstest.Processor(orderstest.Open(t, "sqlite:"+filepath.Join(t.TempDir(), "other.db")), nil, nil)
	bad.APIRevision = ""
	if d := bad.Process(ctx, m); d.Action != consumer.Retry {
		t.Errorf("a Processor without an APIRevision: %+v, want a Retry", d)
	}
}
