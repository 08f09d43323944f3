package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
)

var (
	errRelease          = errors.New("idemhttp: response status releases the reservation")
	errResponseTooLarge = errors.New("idemhttp: response exceeds the snapshot cap")
	errPanic            = errors.New("idemhttp: handler panicked")
)

// serveEnforce is the contract: prepare, reserve, decide, then execute,
// replay, wait or refuse. A OneTransaction operation reserves nothing:
// it looks the scope up and executes in one transaction when there is no
// record (once.go); a record it meets is decided the same way. A
// duplicate of an operation this handler is executing (fl) waits for that
// execution, in both styles, instead of answering 409 IN_PROGRESS.
//
// It serves shadow too (c.shadow; see shadow.go): refusals and answers
// from a record become plain executions while the operation was never
// enforced, everything else is enforce's path. c's verdict is counted.
func (m *Middleware) serveEnforce(w http.ResponseWriter, r *http.Request, next http.Handler, fl *flightSet, marked *atomic.Bool, c *call) {
	w.Header().Set(HeaderContract, idem.ContractVersion)
	if c.idErr != nil {
		m.count(c, registry.VerdictRefused)
		if c.plain(&m.Operation) {
			m.shadowPlain(w, r, next, c, nil)
			return
		}
		if m.Challenge != "" {
			w.Header().Set("WWW-Authenticate", m.Challenge)
		}
		m.refuse(w, idem.CodeUnauthenticated, "authentication required", "")
		return
	}
	body, err := readBody(r, m.Operation.Binding.Canon.MaxBytes)
	if err != nil {
		m.count(c, registry.VerdictRefused)
		m.refuseErr(w, r, err) // the body is gone: a server without idem could not serve it either
		return
	}
	req, err := m.Prepare(r, c.id, body)
	if err != nil {
		m.count(c, refusalVerdict(err))
		if c.plain(&m.Operation) {
			m.shadowPlain(w, withBody(r, &execution{}, body), next, c, nil)
			return
		}
		m.refuseErr(w, r, err)
		return
	}
	claim := m.Operation.claim(req.Scope, req.Fingerprint, c.id, m.WriterEpoch)
	if c.shadow() {
		claim.MaxActive = 0 // a bound enforce would apply is not shadow's to apply
	} else if !m.enforcedFirst(w, r, next, marked, c, &claim, req, body) {
		return
	}
	for attempt := 0; ; attempt++ {
		var rec registry.Record
		var created bool
		if m.Operation.OneTransaction {
			var answered bool
			rec, answered, err = m.executeOnce(w, r, next, fl, c, claim, req, body) // once.go
			if answered {
				return
			}
		} else {
			rec, created, err = m.reserve(r.Context(), claim)
		}
		if err != nil {
			m.refuseErr(w, r, err)
			return
		}
		d := Decide(rec, created, req)
		m.count(c, decisionVerdict(d, rec))
		if c.shadow() && !executes(d, rec) {
			plain, err := m.shadowAnswer(r.Context(), c)
			if err != nil {
				m.refuseErr(w, r, err)
				return
			}
			if plain {
				m.shadowPlain(w, withBody(r, &execution{}, body), next, c, req.Parts.Payload)
				return
			}
		}
		if created {
			if err := failpoint.Hit(failpoint.AfterReserve); err != nil {
				m.release(context.WithoutCancel(r.Context()), rec)
				m.refuseErr(w, r, err)
				return
			}
		}
		if d.Verdict == registry.InProgress && !leaseExpired(rec) && attempt == 0 {
			if done, ok := fl.executing(claim.Scope); ok {
				// This handler is executing the key: wait for that
				// execution rather than answer 409 and have the client
				// poll, then decide again (replay, conflict, or run it
				// if it was released) — for at most the wait cap.
				m.Metrics.join(m.Operation.Name)
				if m.awaitFlight(r.Context(), done) {
					continue
				}
				if err := r.Context().Err(); gone(r, err) {
					m.clientGone(w, r, err)
					return
				}
				m.refuseInFlight(w, rec.OperationID, d.Code)
				return
			}
		}
		switch {
		case d.Verdict == registry.Execute:
			m.executeTracked(w, r, next, fl, claim.Scope, rec, req, body)
			return
		case d.Verdict == registry.Replay:
			m.replay(w, rec)
			return
		case d.Verdict == registry.Unknown && m.Operation.Effects != nil:
			m.settleUnknown(w, r, rec) // settle.go
			return
		case d.Verdict == registry.InProgress && leaseExpired(rec):
			if mine, ok := m.takeOver(w, r, rec); ok { // settle.go
				m.executeTracked(w, r, next, fl, claim.Scope, mine, req, body)
			}
			return
		case d.Wait:
			rec, err = m.await(r.Context(), rec, req.Wait)
			if errors.Is(err, registry.ErrNotFound) && attempt == 0 {
				continue // released while we waited: this request may run it
			}
			if err == nil && rec.State.Terminal() && !rec.Retired() {
				w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(req.Wait/time.Second)))
				m.replay(w, rec)
				return
			}
			if err != nil && !errors.Is(err, registry.ErrNotFound) {
				m.refuseErr(w, r, err)
				return
			}
			d = Decide(rec, false, req)
		}
		if d.Verdict == registry.Conflict {
			// Never reveal the first request, not even its operation ID.
			m.refuse(w, d.Code, "the key was used for a different request", "")
			return
		}
		if d.Verdict == registry.Retired {
			m.refuseRetired(w, rec)
			return
		}
		if rec.OperationID == "" { // released and not retried
			m.refuse(w, idem.CodeInProgress, "the operation is in progress", "")
			return
		}
		m.refuseInFlight(w, rec.OperationID, d.Code)
		return
	}
}

// executeTracked runs execute registered in fl under scope, so that a
// duplicate arriving meanwhile waits for it (serveEnforce). If an
// execution of scope is still registered — one that released its
// reservation and has not returned yet — nothing is registered: this
// request's duplicates then get the two-phase answers (409 IN_PROGRESS,
// or Prefer: wait).
func (m *Middleware) executeTracked(w http.ResponseWriter, r *http.Request, next http.Handler, fl *flightSet, scope idem.ScopeHash, rec registry.Record, req Request, body []byte) {
	if done, leader := fl.lead(scope); leader {
		defer fl.land(scope, done)
	}
	m.execute(w, r, next, rec, req, body)
}

// reserve runs the acceptance point, timing it and asking Admit first.
func (m *Middleware) reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	start := time.Now()
	rec, created, err := m.Store.Reserve(ctx, c)
	m.Metrics.observeReservation(m.Operation.Name, time.Since(start))
	if err != nil || !created || m.Admit == nil {
		return rec, created, err
	}
	// Admission is checked after the reservation so that replays of
	// finished operations never depend on it; a refused reservation is
	// released at once.
	if aerr := m.Admit(ctx); aerr != nil {
		if rerr := m.Store.Release(context.WithoutCancel(ctx), rec); rerr != nil {
			m.log().Error("release after refused admission", "operation_id", rec.OperationID, "err", rerr)
		}
		return registry.Record{}, false, aerr
	}
	return rec, true, nil
}

// execute runs the handler inside the fenced business transaction and
// records its outcome. Once here the request has crossed the acceptance
// point: a client disconnect no longer cancels it (A8); the operation's
// MaxDuration bounds it instead (executionContext).
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, rec registry.Record, req Request, body []byte) {
	op := &m.Operation
	if op.Effects != nil {
		m.executeEffects(w, r, next, rec, req, body) // effect.go: no business transaction
		return
	}
	ctx, stop := m.executionContext(r, rec)
	defer stop()
	m.Metrics.inflight(op.Name, 1)
	defer m.Metrics.inflight(op.Name, -1)
	rw := newRecorder(w, op.maxResponseBody())
	var stmtErr error
	done, err := m.Store.Complete(ctx, rec, m.business(rw, r, next, req, body, &stmtErr))
	m.answer(ctx, w, rw, rec, done, err, stmtErr, true)
}

// answer sends what an execution under rec ended with: once its outcome
// is committed (done), the handler's recorded response; when nothing may
// be recorded (errRelease, errPanic), the handler's response all the
// same; else a refusal (afterFailedComplete). reserved says that rec was
// reserved beforehand (two-phase), so an execution that recorded nothing
// releases it; a one-transaction execution has nothing to release.
// stmtErr is the first error a statement of the handler got (business):
// when recording then failed for a reason that is not storage trouble,
// the handler's failed statement is why (handlerFailed).
func (m *Middleware) answer(ctx context.Context, w http.ResponseWriter, rw *recorder,
	rec, done registry.Record, err, stmtErr error, reserved bool) {
	op := &m.Operation
	if err == nil {
		err = failpoint.Hit(failpoint.AfterCommit) // the outcome is committed either way
	}
	extra := http.Header{HeaderContract: {idem.ContractVersion}}
	switch {
	case err == nil:
		m.Metrics.outcome(op.Name, "executed")
		m.log().Info("operation executed", "operation", op.Name, "operation_id", done.OperationID, "state", done.State, "status", rw.statusOrOK())
		extra.Set(HeaderOperation, done.OperationID)
		rw.flushTo(w, extra)
	case errors.Is(err, errRelease), errors.Is(err, errPanic):
		if reserved {
			m.release(ctx, rec)
		}
		m.Metrics.outcome(op.Name, "released")
		rw.flushTo(w, extra)
	case errors.Is(err, errResponseTooLarge):
		if reserved {
			m.release(ctx, rec)
		}
		m.refuse(w, CodeResponseTooLarge, "the response exceeds the size that can be stored for replay", "")
	case stmtErr != nil && !storageTrouble(err):
		m.handlerFailed(ctx, w, rw, rec, err, stmtErr, reserved)
	default:
		m.afterFailedComplete(ctx, w, rec, err, reserved)
	}
}

// business returns the business function that runs the handler in the
// business transaction, recording its response in rw and in stmtErr the
// first error a statement of the handler got, and turns what it
// answered into the outcome to record: errPanic, errResponseTooLarge or
// errRelease when nothing may be recorded.
func (m *Middleware) business(rw *recorder, r *http.Request, next http.Handler, req Request, body []byte, stmtErr *error) registry.BusinessFunc {
	return func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		e := &execution{rec: rec, caller: req.Identity, payload: req.Parts.Payload}
		e.wt.Tx = tx
		e.tx = &e.wt // no allocation of its own on the claim path
		perr := callHandler(next, rw, withBody(r.WithContext(ctx), e, body))
		*stmtErr = e.wt.failure()
		if perr != nil {
			m.log().Error("handler panicked", "operation_id", rec.OperationID, "panic", perr)
			return registry.Outcome{}, errPanic
		}
		if rw.overflow {
			return registry.Outcome{}, errResponseTooLarge
		}
		state := m.Operation.stateFor(rw.statusOrOK())
		if state == idem.StateFailedFinal && !e.wt.wrote.Load() {
			state = idem.StateRejected // a refusal that changed nothing
		}
		if state == "" {
			return registry.Outcome{}, errRelease
		}
		resp, err := idem.NewResponse(rw.statusOrOK(), rw.header, rw.body.Bytes(), rw.max)
		if err != nil {
			return registry.Outcome{}, errResponseTooLarge
		}
		if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
			return registry.Outcome{}, err
		}
		return registry.Outcome{State: state, Response: resp, Outbox: e.outbox}, nil
	}
}

// afterFailedComplete handles a Complete (or ExecuteOnce) that failed for
// a reason other than the handler: fenced, or storage trouble — possibly
// after the commit reached the database (a lost commit reply). The record
// is read again: if the outcome is there it is replayed; otherwise a
// reservation (reserved) is released if still ours, and the client gets
// 503 (fail closed).
func (m *Middleware) afterFailedComplete(ctx context.Context, w http.ResponseWriter, rec registry.Record, err error, reserved bool) {
	m.log().Error("recording the outcome failed", "operation", m.Operation.Name, "operation_id", rec.OperationID, "err", err)
	if now, ok := m.resolve(ctx, rec, err); ok {
		m.replay(w, now)
		return
	}
	if errors.Is(err, registry.ErrTenantMoved) {
		// Nothing committed, and nothing of the tenant may be written
		// here any more, a release neither: the record stays as it was.
		m.refuseTenantMoved(w)
		return
	}
	if reserved && !errors.Is(err, registry.ErrFenced) {
		m.release(ctx, rec)
	}
	if errors.Is(err, registry.ErrWriterFenced) {
		m.refuse(w, idem.CodeWriterFenced, "this server's writer epoch is no longer current; retry with the same key", "")
		return
	}
	m.Metrics.outcome(m.Operation.Name, "store_error")
	m.refuse(w, idem.CodeStoreUnavailable, "the outcome could not be recorded; retry with the same key", "")
}

// settled reads rec's scope again and reports whether the same operation
// now holds a terminal outcome: after a failed Complete (possibly a lost
// commit reply) or a lost race to Reconcile, that outcome is replayed.
// A failed read counts as not settled; a rec without an operation ID (a
// one-transaction execution that failed before its handler ran) has
// nothing to read.
func (m *Middleware) settled(ctx context.Context, rec registry.Record) (registry.Record, bool) {
	if rec.OperationID == "" {
		return registry.Record{}, false
	}
	now, err := m.Store.Get(ctx, rec.Scope)
	if err != nil || !finished(now, rec) {
		return registry.Record{}, false
	}
	return now, true
}

// finished reports whether now, the record read for rec's scope, is
// rec's operation in a terminal state: its outcome was committed.
func finished(now, rec registry.Record) bool {
	return now.OperationID == rec.OperationID && now.State.Terminal()
}

// resolve is settled after a write that failed with failed. When the store
// could not be reached (registry.ErrUnavailable: the connection died, maybe
// around COMMIT, or the primary is failing over) the write's outcome is
// unknown, and the one thing that can tell is the record itself: resolve
// then keeps reading it, backing off, until the store answers or
// ResolveWait passes — independent of ctx's cancellation, so a client that
// hung up does not cut it short. A terminal record of the same operation
// is the committed outcome; anything else (no record, another operation,
// not terminal, no answer in time) is not settled, and the caller answers
// as it would have: nothing is executed again here.
func (m *Middleware) resolve(ctx context.Context, rec registry.Record, failed error) (registry.Record, bool) {
	if rec.OperationID == "" || !errors.Is(failed, registry.ErrUnavailable) || m.resolveWait() == 0 {
		return m.settled(ctx, rec)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.resolveWait())
	defer cancel()
	m.log().Warn("the outcome's commit is unknown: reading the record until the store answers",
		"operation", m.Operation.Name, "operation_id", rec.OperationID, "wait", m.resolveWait())
	delay := resolvePollStart
	for {
		now, err := m.Store.Get(ctx, rec.Scope)
		if err == nil || !errors.Is(err, registry.ErrUnavailable) {
			ok := err == nil && finished(now, rec)
			m.log().Info("the outcome's commit resolved by reading the record",
				"operation", m.Operation.Name, "operation_id", rec.OperationID, "committed", ok)
			if !ok {
				return registry.Record{}, false
			}
			return now, true
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return registry.Record{}, false
		}
		delay = min(2*delay, resolvePollMax)
	}
}

func (m *Middleware) release(ctx context.Context, rec registry.Record) {
	if err := m.Store.Release(ctx, rec); err != nil && !errors.Is(err, registry.ErrFenced) {
		// The lease will expire and recovery will release it.
		m.log().Error("release failed", "operation_id", rec.OperationID, "err", err)
	}
}

// callHandler runs the handler and turns a panic into an error, so the
// reservation is released instead of left to expire.
func callHandler(next http.Handler, rw *recorder, r *http.Request) (perr any) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				perr = fmt.Sprint(p)
			} else {
				perr = p
			}
			rw.reset()
		}
	}()
	next.ServeHTTP(rw, r)
	return nil
}
