package operation

import (
	"cmp"
	"context"
	"time"

	"github.com/idemkit/idem/registry"
)

// Fallback polling of await: the first poll after pollStart, then
// doubling up to pollMax, or up to watchPollMax when the Store is a
// registry.Watcher (its wake-up does the work, the poll only catches what
// it misses). Core.PollStart and Core.PollMax override them.
const (
	pollStart    = 20 * time.Millisecond
	pollMax      = 250 * time.Millisecond
	watchPollMax = time.Second
)

// await waits until the operation leaves the in-flight states (or is
// retired as an abandoned reservation) or wait elapses, and returns the
// record as last read. A record that disappears
// (its reservation was released) returns registry.ErrNotFound.
//
// It is bounded polling of the registry, which works the same on SQLite
// and PostgreSQL across any number of server processes and costs one
// indexed read per poll: polls start at 20 ms and back off to 250 ms, so
// a waiter sees the outcome at most 250 ms late. When the Store is a
// registry.Watcher (idempg: LISTEN/NOTIFY) the wait also wakes on the
// commit that moves the record, in whatever process it runs, and the
// polls only catch what the wake-up misses (backing off to 1 s). The
// watch is set up before the record is read: an outcome committed after
// the caller's read but before the watch notified nobody, and that read
// sees it. A wake-up that finds the operation still in flight (spurious,
// a takeover) sets up a new watch, again before the read.
func (c *Core) await(ctx context.Context, rec registry.Record, wait time.Duration) (registry.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w, watching := c.Store.(registry.Watcher)
	limit := cmp.Or(c.PollMax, pollMax)
	if watching {
		limit = cmp.Or(c.PollMax, watchPollMax)
	}
	var changed <-chan struct{} // nil, so never ready, without a watch
	stop := func() {}
	defer func() { stop() }()
	watch := func() bool {
		if watching {
			stop()
			changed, stop = w.Watch(ctx, rec.Scope)
		}
		return watching
	}
	delay := cmp.Or(c.PollStart, pollStart)
	t := time.NewTimer(delay)
	defer t.Stop()
	read := watch() // the caller just read; read again only after a watch
	for {
		if read {
			if now, done, err := c.reread(ctx, &rec); done {
				return now, err
			}
		}
		select {
		case <-ctx.Done():
			return rec, nil
		case <-changed:
			read = watch()
		case <-t.C:
			read = true
			delay = min(delay*2, limit)
			t.Reset(delay)
		}
	}
}

// reread reads rec's scope for await. done reports that the wait is over,
// with the record and error to return; otherwise *rec is updated (a
// record released and reserved again by another request is followed).
func (c *Core) reread(ctx context.Context, rec *registry.Record) (_ registry.Record, done bool, _ error) {
	now, err := c.Store.Get(ctx, rec.Scope)
	switch {
	case err != nil && ctx.Err() != nil:
		return *rec, true, nil
	case err != nil:
		return *rec, true, err
	case now.OperationID != rec.OperationID:
		// Released and reserved again by another request: follow it.
		*rec = now
	case !now.State.InFlight() || now.Retired():
		// Settled, or an abandoned reservation retired meanwhile
		// (registry/retention.go): the caller decides on it.
		return now, true, nil
	}
	return registry.Record{}, false, nil
}
