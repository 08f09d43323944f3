package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// executeOnce is the acceptance point of a OneTransaction operation. It
// reads the scope's record first, so a retry of a finished operation (the
// common retry) is answered without running anything: the record is
// returned with answered false for serveEnforce to decide, as a reserved
// scope's would be. With no record, a request whose key is already
// executing in this process waits for that execution and reads again
// (flights.go). Otherwise it asks Admit, runs the handler and
// records its outcome in one transaction (registry.Store.ExecuteOnce),
// and answers the request itself (answered true). When another request
// inserted the scope first, everything this one wrote was rolled back and
// the record that won is returned with answered false.
//
// The reservation histogram gets the time spent in the acceptance point:
// the lookup, plus, for an execution, ExecuteOnce's time outside the
// handler (record insert and the durable commit it shares with the
// business rows). A request that waited for an execution of its key in
// this process, or lost the scope to a concurrent one in another, waited
// as a duplicate waits for an operation in flight: only its lookups
// count.
func (m *Middleware) executeOnce(w http.ResponseWriter, r *http.Request, next http.Handler, c registry.Claim, req Request, body []byte) (rec registry.Record, answered bool, err error) {
	op := &m.Operation
	var lookup time.Duration
	for {
		start := time.Now()
		rec, err = m.Store.Get(r.Context(), c.Scope)
		lookup += time.Since(start)
		if !errors.Is(err, registry.ErrNotFound) {
			m.Metrics.observeReservation(op.Name, lookup)
			return rec, false, err
		}
		done, leader := flights.lead(c.Scope)
		if leader {
			defer flights.land(c.Scope, done)
			break
		}
		// This key is executing in this process: wait for it, then
		// look again (found: replay or conflict; released: run).
		m.Metrics.join(op.Name)
		select {
		case <-done:
		case <-r.Context().Done():
			return registry.Record{}, false, fmt.Errorf("%w: the client went away while its key was executing: %w",
				registry.ErrUnavailable, r.Context().Err())
		}
	}
	if m.Admit != nil {
		if err := m.Admit(r.Context()); err != nil {
			return registry.Record{}, false, err
		}
	}
	// Past this point a client disconnect no longer cancels the request
	// (A8): it runs to its commit or its time limit.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()),
		max(op.MaxDuration, cmpDuration(op.Lease, registry.DefaultLease)))
	defer cancel()
	m.Metrics.inflight(op.Name, 1)
	defer m.Metrics.inflight(op.Name, -1)
	rw := newRecorder(w, cmpInt(op.MaxResponseBody, idem.DefaultMaxResponseBody))
	business := m.business(rw, r, next, req, body)
	var ran registry.Record // as the handler saw it: its operation ID
	var handling time.Duration
	start := time.Now()
	res, err := m.Store.ExecuteOnce(ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		ran = rec
		t := time.Now()
		defer func() { handling = time.Since(t) }()
		return business(ctx, tx, rec)
	})
	if err == nil && res.Verdict != registry.Execute {
		// Another request won the scope: this one's insert waited for
		// the winner's transaction, as a duplicate of an operation in
		// flight waits for its outcome (Prefer: wait) — not time of the
		// acceptance point, which is its lookup.
		m.Metrics.observeReservation(op.Name, lookup)
		return res.Record, false, nil
	}
	m.Metrics.observeReservation(op.Name, lookup+time.Since(start)-handling)
	m.answer(ctx, w, r, rw, ran, res.Record, err, false)
	return registry.Record{}, true, nil
}
