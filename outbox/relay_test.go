package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/registry"
)

// recorder is a Publisher that records every delivery and can be told to
// fail.
type recorder struct {
	mu    sync.Mutex
	seen  map[string]int
	fails atomic.Int32 // fail this many more Publish calls
	want  int          // close all once this many distinct messages arrived
	all   chan struct{}
}

func (r *recorder) Publish(_ context.Context, msgs []registry.OutboxMessage) error {
	if r.fails.Add(-1) >= 0 {
		return errors.New("downstream refused")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.seen[m.ID]++
	}
	if r.all != nil && len(r.seen) == r.want {
		close(r.all)
		r.all = nil
	}
	return nil
}

// fixture is a real SQLite store with n committed operations of two
// outbox messages each, and a settable clock.
type fixture struct {
	store *idemsqlite.Store
	now   atomic.Pointer[time.Time]
	ids   []string
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	return newFixtureWith(t, n, func(i, j int) []byte {
		if j == 0 {
			return []byte("x")
		}
		return []byte(fmt.Sprint(i))
	})
}

// newFixtureWith is newFixture with the payload of the j-th message (0 or
// 1) of the i-th operation.
func newFixtureWith(t *testing.T, n int, payload func(i, j int) []byte) *fixture {
	t.Helper()
	f := &fixture{}
	store, err := idemsqlite.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "o.db"), idemsqlite.Options{
		Now: func() time.Time {
			if p := f.now.Load(); p != nil {
				return *p
			}
			return time.Time{}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	f.store = store
	for i := range n {
		c := registry.Claim{Operation: "outbox.test", Scope: idem.ScopeHash{byte(i), byte(i >> 8), 1}, Fingerprint: idem.Fingerprint{1}}
		rec, created, err := store.Reserve(t.Context(), c)
		if err != nil || !created {
			t.Fatalf("reserve %d: created %v err %v", i, created, err)
		}
		done, err := store.Complete(t.Context(), rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
			return registry.Outcome{
				State:    idem.StateSucceeded,
				Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{}`)},
				Outbox:   []registry.Message{{Topic: "a", Payload: payload(i, 0)}, {Topic: "b", Payload: payload(i, 1)}},
			}, nil
		})
		if err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
		f.ids = append(f.ids, registry.MessageID(done.OperationID, 0), registry.MessageID(done.OperationID, 1))
	}
	return f
}

func (f *fixture) advance(d time.Duration) {
	t := time.Now().Add(d)
	f.now.Store(&t)
}

func TestRelaysDeliverEveryMessageOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 25)
	pub := &recorder{seen: map[string]int{}}
	relays := make([]*outbox.Relay, 3)
	for i := range relays {
		relays[i] = &outbox.Relay{Store: f.store, Publisher: pub, Batch: 4, Lease: time.Minute}
	}
	var wg sync.WaitGroup
	var total atomic.Int64
	for _, r := range relays {
		wg.Go(func() {
			for {
				n, err := r.RunOnce(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					return
				}
				total.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if total.Load() != int64(len(f.ids)) {
		t.Errorf("relays published %d messages, want %d", total.Load(), len(f.ids))
	}
	for _, id := range f.ids {
		if pub.seen[id] != 1 {
			t.Errorf("message %s delivered %d times, want once (no failures happened)", id, pub.seen[id])
		}
	}
}

func TestFailedPublishIsRetriedAfterLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	pub := &recorder{seen: map[string]int{}}
	pub.fails.Store(1)
	r := &outbox.Relay{Store: f.store, Publisher: pub, Batch: 100, Lease: time.Minute}
	if _, err := r.RunOnce(t.Context()); err == nil {
		t.Fatal("a failed publish was not reported")
	}
	if n, err := r.RunOnce(t.Context()); err != nil || n != 0 {
		t.Fatalf("messages claimed again while their lease lasts: n=%d err=%v", n, err)
	}
	f.advance(2 * time.Minute)
	if n, err := r.RunOnce(t.Context()); err != nil || n != len(f.ids) {
		t.Fatalf("after the lease: published %d (err %v), want %d", n, err, len(f.ids))
	}
	for _, id := range f.ids {
		if pub.seen[id] != 1 {
			t.Errorf("message %s delivered %d times after the retry, want 1", id, pub.seen[id])
		}
	}
	f.advance(10 * time.Minute)
	if n, err := r.RunOnce(t.Context()); err != nil || n != 0 {
		t.Errorf("published messages came back: n=%d err=%v", n, err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	all := make(chan struct{})
	pub := &recorder{seen: map[string]int{}, want: len(f.ids), all: all}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	// Batch 1 with 4 messages: full batches run back to back, so all four
	// are published without waiting for the hour-long Interval.
	r := &outbox.Relay{Store: f.store, Publisher: pub, Batch: 1, Interval: time.Hour}
	go func() { done <- r.Run(ctx) }()
	<-all
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
}

// partial is a batch Publisher (not a Deliverer) that delivers every
// message but those in refuse, and reports those as DeliveryErrors.
type partial struct {
	mu     sync.Mutex
	seen   map[string]int
	refuse map[string]bool
}

func (p *partial) Publish(_ context.Context, msgs []registry.OutboxMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	failed := outbox.DeliveryErrors{}
	for _, m := range msgs {
		p.seen[m.ID]++
		if p.refuse[m.ID] {
			failed[m.ID] = errors.New("refused")
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return failed
}

func TestPartialPublishRecordsEachMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	f.at(time.Now())
	pub := &partial{seen: map[string]int{}, refuse: map[string]bool{f.ids[1]: true}}
	r := &outbox.Relay{Store: f.store, Publisher: pub, Batch: 100, Now: f.clock}
	n, err := r.RunOnce(t.Context())
	var failed outbox.DeliveryErrors
	if n != len(f.ids)-1 || !errors.As(err, &failed) || len(failed) != 1 || failed[f.ids[1]] == nil {
		t.Fatalf("RunOnce = %d, %v; want %d delivered and the refused message reported", n, err, len(f.ids)-1)
	}
	// The delivered ones are never claimed again; the refused one is, after
	// its backoff, with its attempt counted.
	f.at(f.clock().Add(time.Hour))
	msgs, err := f.store.ClaimOutbox(t.Context(), 100, time.Minute)
	if err != nil || len(msgs) != 1 || msgs[0].ID != f.ids[1] || msgs[0].Attempts != 1 || msgs[0].LastError == "" {
		t.Errorf("claimable after the partial publish: %+v (err %v), want only %s with 1 attempt", msgs, err, f.ids[1])
	}
	for _, id := range f.ids {
		if pub.seen[id] != 1 {
			t.Errorf("message %s published %d times, want 1", id, pub.seen[id])
		}
	}
}
