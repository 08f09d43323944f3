package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Errors of the door's own answers: a recorder over the snapshot cap
// (errResponseTooLarge), and a plain execution that rolls back
// (errRelease, errPanic; shadow.go).
var (
	errRelease          = errors.New("idemhttp: response status releases the reservation")
	errResponseTooLarge = errors.New("idemhttp: response exceeds the snapshot cap")
	errPanic            = errors.New("idemhttp: handler panicked")
)

// serveEnforce is the HTTP door of the contract: identity, body, key,
// scope and fingerprint (Prepare), the rollout's first enforcement
// (enforcedFirst), then the core's run (operation.Core.Run: claim,
// decide, execute in the operation's style, settle, replay or refuse),
// whose Result is written back (render). The handler runs as the door's
// Execute (execute).
//
// It serves shadow too (c.shadow; see shadow.go): refusals and answers
// from a record become plain executions while the operation was never
// enforced, everything else is enforce's path. c's verdict is counted.
func (m *Middleware) serveEnforce(w http.ResponseWriter, r *http.Request, next http.Handler, core *operation.Core, marked *atomic.Bool, c *call) {
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
	run := operation.Request{Identity: c.id, Scope: req.Scope, Fingerprint: req.Fingerprint, Wait: req.Wait, Unbounded: c.shadow()}
	if !c.shadow() && !m.enforcedFirst(w, r, next, marked, c, &run, req, body) {
		return
	}
	c.w, c.r, c.next, c.body, c.payload = w, r, next, body, req.Parts.Payload
	res := core.Run(m.traceContext(r), run, c) // the core: claim, execute, settle, replay or refuse (tracing.go)
	m.render(w, c, res)                        // answers.go
}

// Execute is the door's execution (operation.Door): it runs the handler
// with the request's body, the business transaction tx (Tx; nil for an
// effect-bearing operation, whose handler calls Effect instead) and rec's
// operation ID, buffering its response in c.rw so that nothing reaches
// the client before the outcome is committed, and turns what it answered
// into the answer to store: ErrRelease for a panic or a status that
// releases, ErrTooLarge for a response over the snapshot cap.
func (c *call) Execute(ctx context.Context, tx registry.Tx, rec registry.Record) (operation.Answer, error) {
	m := c.m
	op := &m.Operation
	rw := newRecorder(c.w, op.MaxResponseBodyOrDefault())
	c.rw = rw
	e := &execution{rec: rec, caller: c.id, payload: c.payload}
	if tx != nil {
		e.wt.Tx = tx
		e.tx = &e.wt // no allocation of its own on the claim path
	}
	perr := callHandler(c.next, rw, withBody(c.r.WithContext(ctx), e, c.body))
	ans := operation.Answer{Status: rw.statusOrOK(), Failed: e.wt.failure()}
	if perr != nil {
		m.log().Error("handler panicked", "operation_id", rec.OperationID, "panic", perr)
		return ans, operation.ErrRelease
	}
	if rw.overflow {
		return ans, operation.ErrTooLarge
	}
	ans.State = op.StateFor(ans.Status, e.wt.wrote.Load())
	if ans.State == "" {
		return ans, operation.ErrRelease
	}
	resp, err := idem.NewResponse(ans.Status, rw.header, rw.body.Bytes(), rw.max)
	if err != nil {
		return ans, operation.ErrTooLarge
	}
	ans.Response = resp
	e.mu.Lock()
	ans.Outbox = e.outbox
	e.mu.Unlock()
	return ans, nil
}

// CountVerdict counts the run's verdict for c (count).
func (c *call) CountVerdict(verdict string) { c.m.count(c, verdict) }

// AnswerPlainly is shadowAnswer for the core (operation.Shadower).
func (c *call) AnswerPlainly(ctx context.Context) (bool, error) { return c.m.shadowAnswer(ctx, c) }

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
