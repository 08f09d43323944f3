// Package outbox relays the transactional outbox: messages written by
// business transactions together with their outcome (registry.Outcome)
// are handed to a Publisher at least once, in storage order per batch.
// Consumers dedupe on the stable message ID.
package outbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem/registry"
)

// Publisher delivers messages downstream. Publish must return an error
// unless every message was delivered; the relay then retries them after
// their claim lease expires (at-least-once).
type Publisher interface {
	Publish(ctx context.Context, msgs []registry.OutboxMessage) error
}

// Store is the part of registry.Store a relay uses.
type Store interface {
	ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]registry.OutboxMessage, error)
	MarkPublished(ctx context.Context, ids []string) error
}

// Defaults for Relay fields left at zero.
const (
	DefaultBatch    = 100
	DefaultLease    = 30 * time.Second
	DefaultInterval = time.Second
)

// Relay moves outbox messages from a Store to a Publisher. Several relays
// (in one process or many) may run against one store: each claim is
// exclusive while its lease lasts. A Relay must not be copied after first
// use; its methods are safe for concurrent use.
type Relay struct {
	Store     Store
	Publisher Publisher
	// Batch is the most messages claimed at once; 0 means DefaultBatch.
	Batch int
	// Lease is how long a claim excludes other relays; it should exceed
	// the time Publish takes. 0 means DefaultLease.
	Lease time.Duration
	// Interval is the pause between polls when the outbox is empty; 0
	// means DefaultInterval.
	Interval time.Duration
	// Logger receives errors of Run; nil means slog.Default().
	Logger *slog.Logger
}

// RunOnce claims one batch, publishes it and marks it published. It
// returns how many messages were published. ctx governs the claim, the
// publish and the mark.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	msgs, err := r.Store.ClaimOutbox(ctx, cmp.Or(r.Batch, DefaultBatch), cmp.Or(r.Lease, DefaultLease))
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	if err := r.Publisher.Publish(ctx, msgs); err != nil {
		return 0, fmt.Errorf("outbox: publish: %w", err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	if err := r.Store.MarkPublished(ctx, ids); err != nil {
		// Published but not marked: they will be published again after the
		// lease, which at-least-once delivery allows.
		return 0, fmt.Errorf("outbox: mark published: %w", err)
	}
	return len(msgs), nil
}

// Run relays until ctx is done, then returns nil. Full batches are
// followed at once by the next; after an empty batch or an error it waits
// Interval. Errors are logged and retried: a relay is best-effort
// plumbing whose correctness rests on the outbox rows, not on the loop.
func (r *Relay) Run(ctx context.Context) error {
	log := cmp.Or(r.Logger, slog.Default())
	batch := cmp.Or(r.Batch, DefaultBatch)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := r.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			log.Error("outbox relay", "err", err)
		}
		if err == nil && n == batch {
			t.Reset(0)
			continue
		}
		t.Reset(cmp.Or(r.Interval, DefaultInterval))
	}
}
