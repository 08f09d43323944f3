package registry

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// DefaultCallTimeout is a good bound for WithTimeout (and the default of
// "idem serve --store-timeout"): well above what SQLite's driver waits for
// its write lock (its queue, then its busy timeout) and above what a
// loaded but working database takes, so only a database that does not
// answer is cut off.
const DefaultCallTimeout = time.Minute

// boundedStore gives every registry call made while serving a request a
// deadline, so that a database that does not answer — an exhausted
// connection pool, a lock held elsewhere, a server gone silent — fails
// the request closed with 503 STORE_UNAVAILABLE (the drivers turn a
// missed deadline into ErrUnavailable) instead of holding it
// until the client gives up. The methods the request path does not use
// (recovery, pruning, the outbox relay, the control commands) pass
// through unbounded: their callers bound them.
//
// The deadline covers the whole call, Complete's business function
// included; a caller's earlier deadline still applies. Neither the
// drivers nor database/sql offer one timeout for "acquire a connection,
// run, commit", hence this wrapper. Safe for concurrent use, like the
// Store it wraps.
type boundedStore struct {
	Store
	d time.Duration
}

// WithTimeout returns s with every call of the request path (Reserve,
// Complete, ExecuteOnce, Release, Get, GetByID, Control, InTx, the effect
// and lease calls, Rollout, MarkEnforced and AddVerdicts) bounded by d, so that storage trouble fails a request
// closed (ErrUnavailable, 503) instead of holding it; see boundedStore.
// d <= 0 returns s itself. When s is a Watcher so is the result (its
// Watch setup bounded by d as well). Use it for the Store of
// idemhttp.Middleware.
func WithTimeout(s Store, d time.Duration) Store {
	if d <= 0 {
		return s
	}
	b := boundedStore{Store: s, d: d}
	if _, ok := s.(Watcher); ok {
		return boundedWatcher{b}
	}
	return b
}

// boundedWatcher is a boundedStore whose Store is a Watcher: the wrapper
// keeps the optional interface visible, with Watch's setup bounded too.
type boundedWatcher struct{ boundedStore }

func (b boundedWatcher) Watch(ctx context.Context, scope idem.ScopeHash) (<-chan struct{}, func()) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.(Watcher).Watch(ctx, scope)
}

func (b boundedStore) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.d)
}

func (b boundedStore) Reserve(ctx context.Context, c Claim) (Record, bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Reserve(ctx, c)
}

func (b boundedStore) Complete(ctx context.Context, rec Record, fn BusinessFunc) (Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Complete(ctx, rec, fn)
}

func (b boundedStore) ExecuteOnce(ctx context.Context, c Claim, fn BusinessFunc) (Result, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.ExecuteOnce(ctx, c, fn)
}

func (b boundedStore) Release(ctx context.Context, rec Record) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Release(ctx, rec)
}

func (b boundedStore) Get(ctx context.Context, scope idem.ScopeHash) (Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Get(ctx, scope)
}

func (b boundedStore) GetByID(ctx context.Context, operationID string) (Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.GetByID(ctx, operationID)
}

func (b boundedStore) Control(ctx context.Context) (Control, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Control(ctx)
}

func (b boundedStore) InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.InTx(ctx, fn)
}

func (b boundedStore) BeginEffect(ctx context.Context, rec Record, name string, request []byte) (Effect, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.BeginEffect(ctx, rec, name, request)
}

func (b boundedStore) ReserveEffect(ctx context.Context, c Claim, name string, request []byte) (Result, Effect, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.ReserveEffect(ctx, c, name, request)
}

func (b boundedStore) CompleteEffects(ctx context.Context, rec Record, answers []EffectAnswer, out Outcome) (Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.CompleteEffects(ctx, rec, answers, out)
}

func (b boundedStore) RecordEffect(ctx context.Context, rec Record, name, handle, result string, answer []byte) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.RecordEffect(ctx, rec, name, handle, result, answer)
}

func (b boundedStore) Effects(ctx context.Context, operationID string) ([]Effect, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Effects(ctx, operationID)
}

func (b boundedStore) MarkUnknown(ctx context.Context, rec Record) (Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.MarkUnknown(ctx, rec)
}

func (b boundedStore) Reconcile(ctx context.Context, operationID string, r Reconciliation) (Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Reconcile(ctx, operationID, r)
}

func (b boundedStore) ExtendLease(ctx context.Context, rec Record, lease time.Duration) (time.Time, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.ExtendLease(ctx, rec, lease)
}

// The rollout calls a request makes: reading the operation's row,
// committing EnforcedAt before its first acceptance, and the verdict
// counts a refresh writes. Unbounded, MarkEnforced on SQLite waited out
// the write lock a request after another (TestFaultPoolExhaustion).

func (b boundedStore) Rollout(ctx context.Context, operation string) (Rollout, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Rollout(ctx, operation)
}

func (b boundedStore) MarkEnforced(ctx context.Context, operation string) (Rollout, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.MarkEnforced(ctx, operation)
}

func (b boundedStore) AddVerdicts(ctx context.Context, counts []VerdictCount) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.AddVerdicts(ctx, counts)
}
