package idemhttp

import (
	"context"
	"time"

	"github.com/idemkit/idem/registry"
)

// await polls the registry until the operation leaves the in-flight
// states or wait elapses, and returns the record as last read. A record
// that disappears (its reservation was released) returns
// registry.ErrNotFound.
//
// Waiting is bounded polling of the registry rather than LISTEN/NOTIFY: it
// works the same on SQLite and PostgreSQL, across any number of server
// processes, needs no long-lived listener connection per instance, and
// costs one indexed read per poll. Polls start at 20 ms and back off to
// 250 ms, so a waiter sees the outcome at most 250 ms late.
func (m *Middleware) await(ctx context.Context, rec registry.Record, wait time.Duration) (registry.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	delay := 20 * time.Millisecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return rec, nil
		case <-t.C:
		}
		now, err := m.Store.Get(ctx, rec.Scope)
		switch {
		case err != nil && ctx.Err() != nil:
			return rec, nil
		case err != nil:
			return rec, err
		case now.OperationID != rec.OperationID:
			// Released and reserved again by another request: follow it.
			rec = now
		case !now.State.InFlight():
			return now, nil
		}
		delay = min(delay*2, 250*time.Millisecond)
		t.Reset(delay)
	}
}
