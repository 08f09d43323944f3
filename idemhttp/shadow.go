package idemhttp

import (
	"context"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// serveOff passes the request through with a plain business transaction.
func (m *Middleware) serveOff(w http.ResponseWriter, r *http.Request, next http.Handler) {
	m.plain(w, r, next, nil, registry.Record{})
}

// plain runs the handler in a plain transaction (Store.InTx), buffering
// its response so a failed commit is never reported as success. It returns
// the recorder, or nil if the response was already answered with an error.
func (m *Middleware) plain(w http.ResponseWriter, r *http.Request, next http.Handler, payload []byte, rec registry.Record) *recorder {
	rw := newRecorder(w, 1<<62)
	err := m.Store.InTx(r.Context(), func(ctx context.Context, tx registry.Tx) error {
		e := &execution{tx: tx, rec: rec, payload: payload}
		r2 := r.WithContext(withExecution(ctx, e))
		if perr := callHandler(next, rw, r2); perr != nil {
			m.log().Error("handler panicked", "operation", m.Operation.Name, "panic", perr)
			return errPanic
		}
		if rw.statusOrOK() >= 500 {
			return errRelease // roll back, as a server without idem would on an error
		}
		return nil
	})
	switch {
	case err == nil, err == errRelease, err == errPanic:
		rw.flushTo(w, nil)
		return rw
	case gone(r, err): // the client went away: its context ended the transaction
		// No record is kept here: say nothing about the outcome, and
		// nothing about retrying with the key (a retry executes again).
		m.log().Info("the client went away before its transaction ended", "operation", m.Operation.Name, "err", err)
		m.refuse(w, CodeClientGone, "the request ended before its transaction did", "")
		return nil
	default:
		m.log().Error("business transaction failed", "operation", m.Operation.Name, "err", err)
		m.refuse(w, idem.CodeStoreUnavailable, "the request could not be committed", "")
		return nil
	}
}

// serveShadow executes every request as if there were no middleware, and
// records what enforce mode would have decided: it reserves the scope and,
// after the handler ran, records the outcome in its own transaction.
// Registry trouble is logged and counted, never shown to the client.
func (m *Middleware) serveShadow(w http.ResponseWriter, r *http.Request, next http.Handler) {
	op := &m.Operation
	shadow := func(decision string) { m.Metrics.shadowDecision(op.Name, decision) }
	id, err := m.Identity(r)
	if err != nil {
		shadow("would_refuse")
		m.plain(w, r, next, nil, registry.Record{})
		return
	}
	body, err := readBody(r, op.Binding.Canon.MaxBytes)
	if err != nil {
		shadow("would_refuse")
		m.refuseErr(w, r, err) // the body is gone; a server without idem could not serve it either
		return
	}
	r = withBody(r, &execution{}, body)
	req, err := m.Prepare(r, id, body)
	if err != nil {
		shadow("would_refuse")
		m.plain(w, r, next, nil, registry.Record{})
		return
	}
	c := op.claim(req.Scope, req.Fingerprint, id, m.WriterEpoch)
	c.MaxActive = 0
	rec, created, err := m.Store.Reserve(r.Context(), c)
	if err != nil {
		shadow("store_error")
		m.log().Warn("shadow reservation failed", "operation", op.Name, "err", err)
		m.plain(w, r, next, req.Parts.Payload, registry.Record{})
		return
	}
	if !created {
		shadow("would_" + Decide(rec, false, req).Verdict.String())
		m.plain(w, r, next, req.Parts.Payload, registry.Record{})
		return
	}
	shadow("would_execute")
	rw := m.plain(w, r, next, req.Parts.Payload, rec)
	ctx := context.WithoutCancel(r.Context())
	state := idem.State("")
	if rw != nil { // nil: nothing was committed
		state = op.stateFor(rw.statusOrOK())
	}
	if state == "" {
		m.release(ctx, rec)
		return
	}
	resp, err := idem.NewResponse(rw.statusOrOK(), rw.header, rw.body.Bytes(), op.maxResponseBody())
	if err != nil {
		m.release(ctx, rec)
		return
	}
	if _, err := m.Store.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return registry.Outcome{State: state, Response: resp}, nil
	}); err != nil {
		m.log().Warn("shadow outcome not recorded", "operation", op.Name, "operation_id", rec.OperationID, "err", err)
	}
}
