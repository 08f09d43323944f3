package idemhttp

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem/registry"
)

// executionContext returns the context an accepted execution runs under:
// not cancelled when the client goes away (A8), and bounded by the
// operation's MaxDuration (by default its lease). When MaxDuration exceeds
// the lease, a heartbeat extends the lease every third of it until the
// execution ends, so recovery never takes over a live execution; if the
// heartbeat is fenced (the record moved on), it stops and the execution's
// own commit will be fenced too. The returned stop function ends the
// heartbeat and releases the context.
func (m *Middleware) executionContext(r *http.Request, rec registry.Record) (context.Context, func()) {
	op := &m.Operation
	lease := registry.LeaseOrDefault(op.Lease)
	limit := op.executionLimit()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), limit)
	if limit <= lease {
		return ctx, cancel
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := m.Store.ExtendLease(ctx, rec, lease)
			switch {
			case errors.Is(err, registry.ErrFenced):
				m.log().Warn("lease heartbeat fenced", "operation", op.Name, "operation_id", rec.OperationID)
				return
			case err != nil && ctx.Err() == nil:
				m.log().Error("lease heartbeat failed", "operation", op.Name, "operation_id", rec.OperationID, "err", err)
			}
		}
	})
	return ctx, func() { cancel(); wg.Wait() }
}
