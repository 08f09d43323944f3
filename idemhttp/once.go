package idemhttp

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// executeOnce is the acceptance point of a OneTransaction operation. It
// reads the scope's record first, so a retry of a finished operation (the
// common retry) is answered without running anything: the record is
// returned with answered false for serveEnforce to decide, as a reserved
// scope's would be. With no record, a request whose key is already
// executing in this handler waits for that execution and reads again
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
func (m *Middleware) executeOnce(w http.ResponseWriter, r *http.Request, next http.Handler, fl *flightSet, cl *call, c registry.Claim, req Request, body []byte) (rec registry.Record, answered bool, err error) {
	op := &m.Operation
	var lookup time.Duration
	var land func() // wakes this key's waiters; at once after the commit, at the latest on return
	for {
		start := time.Now()
		rec, err = m.Store.Get(r.Context(), c.Scope)
		lookup += time.Since(start)
		if !errors.Is(err, registry.ErrNotFound) {
			m.Metrics.observeReservation(op.Name, lookup)
			return rec, false, err
		}
		done, leader := fl.lead(c.Scope)
		if leader {
			land = sync.OnceFunc(func() { fl.land(c.Scope, done) })
			defer land()
			break
		}
		// This key is executing in this handler: wait for it, then
		// look again (found: replay or conflict; released: run) — for
		// at most the wait cap, like a two-phase duplicate's
		// Prefer: wait; longer, or when the client goes away, it is
		// answered as in progress.
		m.Metrics.join(op.Name)
		if !m.awaitFlight(r.Context(), done) {
			if err := r.Context().Err(); gone(r, err) {
				m.clientGone(w, r, err)
				return registry.Record{}, true, nil
			}
			m.count(cl, registry.VerdictInFlight) // enforce's answer: the first request is in flight
			w.Header().Set("Retry-After", "1")
			m.refuse(w, idem.CodeInProgress, "the first request with this key is still executing", "")
			return registry.Record{}, true, nil
		}
	}
	if m.Admit != nil {
		if err := m.Admit(r.Context()); err != nil {
			return registry.Record{}, false, err
		}
	}
	// Past this point a client disconnect no longer cancels the request
	// (A8): it runs to its commit or its time limit.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), op.executionLimit())
	defer cancel()
	m.Metrics.inflight(op.Name, 1)
	defer m.Metrics.inflight(op.Name, -1)
	rw := newRecorder(w, op.maxResponseBody())
	var stmtErr error
	business := m.business(rw, r, next, req, body, &stmtErr)
	var ran registry.Record // as the handler saw it: its operation ID
	var handling time.Duration
	start := time.Now()
	res, err := m.Store.ExecuteOnce(ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		ran = rec
		t := time.Now()
		defer func() { handling = time.Since(t) }()
		return business(ctx, tx, rec)
	})
	land() // the outcome is committed, or nothing will be: the waiters may look
	if err != nil || res.Verdict == registry.Execute {
		m.count(cl, registry.VerdictExecute)
	}
	if err == nil && res.Verdict != registry.Execute {
		// Another request won the scope: this one's insert waited for
		// the winner's transaction, as a duplicate of an operation in
		// flight waits for its outcome (Prefer: wait) — not time of the
		// acceptance point, which is its lookup.
		m.Metrics.observeReservation(op.Name, lookup)
		return res.Record, false, nil
	}
	m.Metrics.observeReservation(op.Name, lookup+time.Since(start)-handling)
	m.answer(ctx, w, rw, ran, res.Record, err, stmtErr, false)
	return registry.Record{}, true, nil
}

// awaitFlight waits for done, at most the wait cap; false when the cap
// passed or ctx ended first.
func (m *Middleware) awaitFlight(ctx context.Context, done <-chan struct{}) bool {
	t := time.NewTimer(m.waitCap())
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
