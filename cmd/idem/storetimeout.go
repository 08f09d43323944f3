package main

import (
	"context"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// defaultStoreTimeout is the default of "idem serve --store-timeout":
// well above what SQLite's driver waits for its write lock (its queue,
// then its busy timeout) and above what a loaded but working database
// takes, so only a database that does not answer is cut off.
const defaultStoreTimeout = time.Minute

// boundedStore gives every registry call made while serving a request a
// deadline, so that a database that does not answer — an exhausted
// connection pool, a lock held elsewhere, a server gone silent — fails
// the request closed with 503 STORE_UNAVAILABLE (the drivers turn a
// missed deadline into registry.ErrUnavailable) instead of holding it
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
	registry.Store
	d time.Duration
}

// withStoreTimeout returns s bounded by d, or s itself when d is 0.
func withStoreTimeout(s registry.Store, d time.Duration) registry.Store {
	if d <= 0 {
		return s
	}
	return boundedStore{Store: s, d: d}
}

func (b boundedStore) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.d)
}

func (b boundedStore) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Reserve(ctx, c)
}

func (b boundedStore) Complete(ctx context.Context, rec registry.Record, fn registry.BusinessFunc) (registry.Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Complete(ctx, rec, fn)
}

func (b boundedStore) ExecuteOnce(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.ExecuteOnce(ctx, c, fn)
}

func (b boundedStore) Release(ctx context.Context, rec registry.Record) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Release(ctx, rec)
}

func (b boundedStore) Get(ctx context.Context, scope idem.ScopeHash) (registry.Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Get(ctx, scope)
}

func (b boundedStore) GetByID(ctx context.Context, operationID string) (registry.Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.GetByID(ctx, operationID)
}

func (b boundedStore) Control(ctx context.Context) (registry.Control, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Control(ctx)
}

func (b boundedStore) InTx(ctx context.Context, fn func(ctx context.Context, tx registry.Tx) error) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.InTx(ctx, fn)
}

func (b boundedStore) BeginEffect(ctx context.Context, rec registry.Record, name string, request []byte) (registry.Effect, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.BeginEffect(ctx, rec, name, request)
}

func (b boundedStore) RecordEffect(ctx context.Context, rec registry.Record, name, handle, result string, answer []byte) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.RecordEffect(ctx, rec, name, handle, result, answer)
}

func (b boundedStore) Effects(ctx context.Context, operationID string) ([]registry.Effect, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Effects(ctx, operationID)
}

func (b boundedStore) MarkUnknown(ctx context.Context, rec registry.Record) (registry.Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.MarkUnknown(ctx, rec)
}

func (b boundedStore) Reconcile(ctx context.Context, operationID string, r registry.Reconciliation) (registry.Record, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.Reconcile(ctx, operationID, r)
}

func (b boundedStore) ExtendLease(ctx context.Context, rec registry.Record, lease time.Duration) (time.Time, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	return b.Store.ExtendLease(ctx, rec, lease)
}
