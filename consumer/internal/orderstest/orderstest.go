// Package orderstest is what the consumer door's tests share: a registry
// with a business table of orders, a Processor whose handler writes one
// order per message, and the count of orders.
package orderstest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// Open opens the registry at dsn with the table orders, closed when t
// ends.
func Open(t testing.TB, dsn string) registry.Store {
	t.Helper()
	st, err := idemstore.Open(context.Background(), dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// Processor returns a Processor on st (MaxAttempts 3, a short retry
// delay) whose handler inserts the order of each message, keyed by the
// message's key, and fails (after the insert, so nothing may commit)
// when fail says so. replays, if not nil, counts the replays.
func Processor(st registry.Store, replays *atomic.Int64, fail func(consumer.Message) bool) *consumer.Processor {
	return &consumer.Processor{Store: st, Operation: "orders.ingest", APIRevision: "v1", Source: idem.Identity{Principal: "shop"},
		MaxAttempts: 3, RetryDelay: 20 * time.Millisecond,
		Handler: func(ctx context.Context, tx registry.Tx, m consumer.Message) (consumer.Result, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, body) VALUES ($1, $2)`, m.Key, string(m.Body)); err != nil {
				return consumer.Result{}, err
			}
			if fail != nil && fail(m) {
				return consumer.Result{}, errors.New("the handler failed")
			}
			return consumer.Result{Answer: []byte(`{"ok":true}`)}, nil
		},
		Observe: func(_ consumer.Message, d consumer.Decision) {
			if d.Verdict == registry.Replay && replays != nil {
				replays.Add(1)
			}
		}}
}

// Always is a fail function that fails every message.
func Always(consumer.Message) bool { return true }

// Count counts the orders.
func Count(t testing.TB, st registry.Store) int {
	t.Helper()
	var n int
	if err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
