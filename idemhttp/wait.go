package idemhttp

import (
	"cmp"
	"context"
	"time"

	"github.com/idemkit/idem/registry"
)

// Fallback polling of await: the first poll after pollStart, then
// doubling up to pollMax, or up to watchPollMax when the Store is a
// registry.Watcher (its wake-up does the work, the poll only catches what
// it misses). Middleware.pollStart and Middleware.pollMax override them
// in tests.
const (
	pollStart    = 20 * time.Millisecond
	pollMax      = 250 * time.Millisecond
	watchPollMax = time.Second
)

// await waits until the operation leaves the in-flight states or wait
// elapses, and returns the record as last read. A record that disappears
// (its reservation was released) returns registry.ErrNotFound.
//
// When the Store is a registry.Watcher (idempg: LISTEN/NOTIFY) the wait
// wakes on the commit that moves the record, in whatever process it runs;
// see awaitWatch. Otherwise it is bounded polling of the registry, which
// works the same on SQLite and PostgreSQL across any number of server
// processes and costs one indexed read per poll: polls start at 20 ms and
// back off to 250 ms, so a waiter sees the outcome at most 250 ms late.
func (m *Middleware) await(ctx context.Context, rec registry.Record, wait time.Duration) (registry.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if w, ok := m.Store.(registry.Watcher); ok {
		return m.awaitWatch(ctx, w, rec)
	}
	delay := cmp.Or(m.pollStart, pollStart)
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return rec, nil
		case <-t.C:
		}
		now, done, err := m.reread(ctx, &rec)
		if done {
			return now, err
		}
		delay = min(delay*2, cmp.Or(m.pollMax, pollMax))
		t.Reset(delay)
	}
}

// awaitWatch is await on a Watcher: it watches the scope, then reads the
// record, then waits for the wake-up or the fallback poll (20 ms backing
// off to 1 s), and reads again. The order matters: an outcome committed
// after the caller's read but before the watch was set up notifies nobody,
// and the read after Watch sees it. A wake-up that finds the operation
// still in flight (spurious, a takeover) sets up a new watch, again
// before the read.
func (m *Middleware) awaitWatch(ctx context.Context, w registry.Watcher, rec registry.Record) (registry.Record, error) {
	changed, stop := w.Watch(ctx, rec.Scope)
	defer func() { stop() }()
	delay := cmp.Or(m.pollStart, pollStart)
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		now, done, err := m.reread(ctx, &rec)
		if done {
			return now, err
		}
		select {
		case <-ctx.Done():
			return rec, nil
		case <-changed:
			stop()
			changed, stop = w.Watch(ctx, rec.Scope)
		case <-t.C:
			delay = min(delay*2, cmp.Or(m.pollMax, watchPollMax))
			t.Reset(delay)
		}
	}
}

// reread reads rec's scope for await. done reports that the wait is over,
// with the record and error to return; otherwise *rec is updated (a
// record released and reserved again by another request is followed).
func (m *Middleware) reread(ctx context.Context, rec *registry.Record) (_ registry.Record, done bool, _ error) {
	now, err := m.Store.Get(ctx, rec.Scope)
	switch {
	case err != nil && ctx.Err() != nil:
		return *rec, true, nil
	case err != nil:
		return *rec, true, err
	case now.OperationID != rec.OperationID:
		// Released and reserved again by another request: follow it.
		*rec = now
	case !now.State.InFlight():
		return now, true, nil
	}
	return registry.Record{}, false, nil
}
