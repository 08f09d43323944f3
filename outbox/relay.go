// Package outbox relays the transactional outbox: messages written by
// business transactions together with their outcome (registry.Outcome)
// are handed to a Publisher at least once. Consumers dedupe on the stable
// message ID.
//
// Delivery is per message: a message that cannot be delivered is retried
// with exponential backoff (Relay.Backoff) without holding back the
// others, and after Relay.MaxAttempts failed attempts, or once it is older
// than Relay.MaxAge, it becomes a dead letter — kept, never retried by
// itself, listed by registry.OutboxDelivery.DeadLetters ("idem ops
// dead-letters") until an operator requeues it. Webhook is the Publisher
// of "idem serve --webhook" and "idem relay": one signed HTTP POST per
// message (Standard Webhooks).
package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/registry"
)

// Publisher delivers messages downstream. Publish returns nil when every
// message was delivered, a DeliveryErrors naming the messages that were
// not (the others were), or any other error when none was. The relay
// retries the undelivered ones after their backoff (at-least-once).
type Publisher interface {
	Publish(ctx context.Context, msgs []registry.OutboxMessage) error
}

// Deliverer is a Publisher that can also deliver one message at a time.
// The relay prefers it: it delivers the messages of a batch concurrently
// and records each result as soon as it is known, so a slow message holds
// back neither the bookkeeping of the others nor, after a crash, causes
// them to be delivered again. Deliver returns nil when m was delivered.
type Deliverer interface {
	Publisher
	Deliver(ctx context.Context, m registry.OutboxMessage) error
}

// DeliveryErrors is the error of a Publish that delivered some messages
// and not others: the IDs of the messages not delivered, with why. A
// message of the batch whose ID is absent was delivered.
type DeliveryErrors map[string]error

func (e DeliveryErrors) Error() string {
	ids := slices.Sorted(maps.Keys(e))
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, id+": "+e[id].Error())
	}
	return fmt.Sprintf("%d messages not delivered: %s", len(e), strings.Join(parts, "; "))
}

// Permanent marks err as a failure that no retry can cure (a payload the
// publisher cannot encode, say): the relay makes the message a dead letter
// at once instead of retrying it.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ err error }

func (e permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Store is the part of registry.Store a relay uses.
type Store interface {
	ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]registry.OutboxMessage, error)
	MarkPublished(ctx context.Context, ids []string) error
	FailOutbox(ctx context.Context, f registry.OutboxFailure) error
}

// Defaults for Relay fields left at zero.
const (
	DefaultBatch       = 100
	DefaultLease       = 30 * time.Second
	DefaultInterval    = time.Second
	DefaultMaxAttempts = 10
	DefaultMaxAge      = 72 * time.Hour
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = time.Hour
)

// finishTimeout bounds the store calls that record a batch's results once
// the relay's context is done (Run stopping), so deliveries made are not
// repeated needlessly.
const finishTimeout = 5 * time.Second

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
	// MaxAttempts is how many failed attempts make a message a dead
	// letter; 0 means DefaultMaxAttempts.
	MaxAttempts int
	// MaxAge: a message that fails when it is at least this old (since it
	// was written, by Now) becomes a dead letter whatever its attempt
	// count; 0 means DefaultMaxAge, negative means no age limit.
	MaxAge time.Duration
	// BackoffBase and BackoffMax shape the backoff; see Backoff. 0 means
	// DefaultBackoffBase and DefaultBackoffMax.
	BackoffBase, BackoffMax time.Duration
	// Metrics records deliveries, failed attempts and dead letters; nil
	// records nothing.
	Metrics *Metrics
	// Now is the clock of MaxAge; nil means time.Now.
	Now func() time.Time
	// Logger receives errors of Run; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider traces each delivery (trace.go): a child of the span
	// that recorded the message; nil means otel.GetTracerProvider(),
	// which traces nothing until the application sets one.
	TracerProvider trace.TracerProvider
}

// Backoff returns how long a message waits after its attempts-th failed
// attempt (attempts >= 1) before the next: BackoffBase doubled for every
// earlier failure, at most BackoffMax — 1s, 2s, 4s … 1h with the
// defaults. It has no jitter: relays claim messages one by one, so their
// retries do not come in lockstep with each other.
func (r *Relay) Backoff(attempts int) time.Duration {
	base, ceiling := cmp.Or(r.BackoffBase, DefaultBackoffBase), cmp.Or(r.BackoffMax, DefaultBackoffMax)
	d := base
	for i := 1; i < attempts && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// RunOnce claims one batch, delivers it, marks the delivered messages
// published and records a failed attempt (backoff or dead letter) for
// each of the others. A Deliverer gets one call per message, concurrently,
// each result recorded as soon as it is known; any other Publisher gets
// the batch. It returns how many messages were delivered, and an error if
// any message was not or a store call failed. ctx governs the claim and
// the deliveries; their results are recorded even if ctx ends meanwhile
// (bounded by a few seconds).
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	_, n, err := r.runOnce(ctx)
	return n, err
}

// runOnce is RunOnce that also returns how many messages it claimed.
func (r *Relay) runOnce(ctx context.Context) (claimed, delivered int, err error) {
	msgs, err := r.Store.ClaimOutbox(ctx, cmp.Or(r.Batch, DefaultBatch), cmp.Or(r.Lease, DefaultLease))
	if err != nil || len(msgs) == 0 {
		return 0, 0, err
	}
	if d, ok := r.Publisher.(Deliverer); ok {
		delivered, err = r.deliverEach(ctx, d, msgs)
		return len(msgs), delivered, err
	}
	// A message whose payload the Store could not open (m.Unreadable) is
	// never published: a dead letter at once.
	unreadable := DeliveryErrors{}
	var readable []registry.OutboxMessage
	for _, m := range msgs {
		if m.Unreadable != nil {
			unreadable[m.ID] = Permanent(m.Unreadable)
		} else {
			readable = append(readable, m)
		}
	}
	var perr error
	if len(readable) > 0 {
		pctx, span := r.startPublish(ctx, readable) // trace.go
		perr = r.Publisher.Publish(pctx, readable)
		endDelivery(span, perr)
	}
	var failed DeliveryErrors
	switch {
	case perr == nil:
		failed = DeliveryErrors{}
	case errors.As(perr, &failed):
	default:
		failed = DeliveryErrors{}
		for _, m := range readable {
			failed[m.ID] = perr
		}
	}
	for id, err := range unreadable {
		failed[id] = err
	}
	// The deliveries happened: record them even if Run is stopping.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	var ok []string
	for _, m := range msgs {
		if failed[m.ID] == nil {
			ok = append(ok, m.ID)
		}
	}
	var errs []error
	if err := r.markPublished(sctx, ok); err != nil {
		errs = append(errs, err)
	}
	for _, m := range msgs {
		if ferr := failed[m.ID]; ferr != nil {
			if err := r.recordFailure(ctx, sctx, m, ferr); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("outbox: publish: %w", failed))
	}
	return len(msgs), len(ok), errors.Join(errs...)
}

// deliverEach delivers msgs concurrently, one Deliver call each, and
// records each result as soon as it is known.
func (r *Relay) deliverEach(ctx context.Context, d Deliverer, msgs []registry.OutboxMessage) (int, error) {
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		delivered int
		failed    = DeliveryErrors{}
		errs      []error
	)
	for _, m := range msgs {
		wg.Go(func() {
			var derr error
			if m.Unreadable != nil {
				// The Store's key ring does not open the payload for this
				// message: never delivered, a dead letter at once.
				derr = Permanent(m.Unreadable)
			} else {
				dctx, span := r.startDelivery(ctx, m) // trace.go
				derr = d.Deliver(dctx, m)
				endDelivery(span, derr)
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
			defer cancel()
			var err error
			if derr == nil {
				err = r.markPublished(sctx, []string{m.ID})
			} else {
				err = r.recordFailure(ctx, sctx, m, derr)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case derr != nil:
				failed[m.ID] = derr
			case err == nil:
				delivered++
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("outbox: publish: %w", failed))
	}
	return delivered, errors.Join(errs...)
}

// markPublished marks the delivered messages ids published (sctx governs
// it) and counts them.
func (r *Relay) markPublished(sctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := r.Store.MarkPublished(sctx, ids); err != nil {
		// Delivered but not marked: delivered again after the lease, which
		// at-least-once delivery allows.
		return fmt.Errorf("outbox: mark published: %w", err)
	}
	r.Metrics.delivered(len(ids))
	return nil
}

// recordFailure records a failed attempt of m (sctx governs the store
// call). When ctx, the relay's, has ended, the failure is most likely its
// own doing: nothing is recorded, and m is retried once its claim expires
// without an attempt counted.
func (r *Relay) recordFailure(ctx, sctx context.Context, m registry.OutboxMessage, ferr error) error {
	if ctx.Err() != nil {
		return nil
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	maxAge := cmp.Or(r.MaxAge, DefaultMaxAge)
	attempts := m.Attempts + 1
	f := registry.OutboxFailure{
		ID:         m.ID,
		Attempts:   m.Attempts,
		Error:      truncate(ferr.Error(), maxErrorLen),
		RetryAfter: r.Backoff(attempts),
		Dead: attempts >= cmp.Or(r.MaxAttempts, DefaultMaxAttempts) ||
			(maxAge > 0 && now().Sub(m.CreatedAt) >= maxAge) ||
			errors.As(ferr, new(permanentError)),
	}
	switch err := r.Store.FailOutbox(sctx, f); {
	case errors.Is(err, registry.ErrFenced):
		// Another relay claimed the message after this claim expired and
		// recorded its own result first; that one stands.
	case err != nil:
		return fmt.Errorf("outbox: record failed attempt of %s: %w", m.ID, err)
	default:
		r.Metrics.failed(f.Dead)
	}
	return nil
}

// maxErrorLen bounds the error text kept with a message.
const maxErrorLen = 512

// truncate cuts s to at most n bytes, dropping a rune cut in two.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// Run relays until ctx is done, then returns nil. Full batches are
// followed at once by the next, whether or not all their messages were
// delivered (failed ones wait out their backoff, the others go on) and
// whether or not recording their results failed; after a short batch or a
// failed claim it waits Interval. Errors are logged and
// retried: a relay is best-effort plumbing whose correctness rests on the
// outbox rows, not on the loop.
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
		claimed, _, err := r.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			log.Error("outbox relay", "err", err)
		}
		if claimed == batch {
			t.Reset(0)
			continue
		}
		t.Reset(cmp.Or(r.Interval, DefaultInterval))
	}
}
