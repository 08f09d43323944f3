package payments

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// TestConcurrentCreate sends 20 identical requests at once and checks,
// over the recorded answers and the database, that exactly one payment and
// one outbox message exist and every answer is the one outcome or an
// in-flight refusal.
func testConcurrentCreate(t *testing.T, b *testBundle) {
	const n = 20
	const body = `{"amount":"42.00","currency":"EUR","payee":"acct_9"}`
	answers := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = b.post(t, "tok-alice", "k-race", body)
		})
	}
	close(start)
	wg.Wait()

	var first *response
	executed := 0
	for i := range answers {
		a := &answers[i]
		switch {
		case a.status == http.StatusCreated:
			if a.header.Get("Idempotent-Replayed") == "" {
				executed++
			}
			if first == nil {
				first = a
			} else if !bytes.Equal(a.body, first.body) || a.header.Get("Idempotency-Operation") != first.header.Get("Idempotency-Operation") {
				t.Errorf("answer %d differs: %v, op %s; first %v, op %s", i, a, a.header.Get("Idempotency-Operation"),
					first, first.header.Get("Idempotency-Operation"))
			}
		case a.status == http.StatusConflict && a.code() == idem.CodeInProgress:
		default:
			t.Errorf("answer %d: %v", i, a)
		}
	}
	if executed != 1 {
		t.Errorf("%d first executions, want 1", executed)
	}
	if first == nil {
		t.Fatal("no answer was 201")
	}
	requireReplay(t, *first, b.post(t, "tok-alice", "k-race", body))

	if got := countPayments(t, b.store); got != 1 {
		t.Errorf("%d payment rows, want 1", got)
	}
	op := first.header.Get("Idempotency-Operation")
	msgs, err := b.store.ClaimOutbox(context.Background(), 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("%d outbox messages, want 1: %+v", len(msgs), msgs)
	}
	m := msgs[0]
	if m.ID != registry.MessageID(op, 0) || m.OperationID != op || m.Topic != TopicCreated || !bytes.Equal(m.Payload, first.body) {
		t.Errorf("outbox message %s %s %s %s, want %s %s %s %s", m.ID, m.OperationID, m.Topic, m.Payload,
			registry.MessageID(op, 0), op, TopicCreated, first.body)
	}
}
