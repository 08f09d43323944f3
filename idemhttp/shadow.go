package idemhttp

import (
	"context"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Shadow, safe to leave (docs/contract.md, "Rollout").
//
// A request served in shadow goes through serveEnforce, which differs in
// three places only: where enforce would refuse the request (no key, a
// bad key or payload, no identity), shadow counts that verdict and
// executes it plainly, without a record; where enforce would answer from
// a record (replay, conflict, in flight, unknown, retired), shadow counts
// that verdict, reads the rollout row fresh (shadowAnswer) and executes
// plainly only if the operation was never enforced — once it was, it
// answers exactly as enforce, so no stored answer is ever lost or changed;
// where enforce would execute, shadow executes exactly as enforce does,
// so the record commits with the business writes (Complete, or
// ExecuteOnce) and a switch to enforce finds it. An effect-bearing
// operation never executes plainly: every request it would refuse or
// answer from a record is answered as enforce answers it.

// serveOff passes the request through with a plain business transaction.
func (m *Middleware) serveOff(w http.ResponseWriter, r *http.Request, next http.Handler, c *call) {
	m.plain(w, r, next, nil, c.id)
}

// shadowPlain executes a shadow request plainly (plain), as a server
// without idempotency would: no record, no contract headers. r's body
// must still be readable.
func (m *Middleware) shadowPlain(w http.ResponseWriter, r *http.Request, next http.Handler, c *call, payload []byte) {
	w.Header().Del(HeaderContract)
	m.plain(w, r, next, payload, c.id)
}

// shadowAnswer decides, for a shadow request that enforce would answer
// from a record, whether it executes plainly: it reads the rollout row
// fresh from the store — not the cache: a record written under enforce
// is always preceded by a committed EnforcedAt (MarkEnforced, SetRollout)
// — and reports true only if the operation was never enforced. Otherwise
// c is marked enforced and the caller answers as enforce does. An error
// must refuse the request (fail closed).
func (m *Middleware) shadowAnswer(ctx context.Context, c *call) (bool, error) {
	if !c.plain(&m.Operation) {
		return false, nil
	}
	var row registry.Rollout
	var err error
	if m.Rollouts != nil {
		row, err = m.Rollouts.latest(ctx, m.Operation.Name)
	} else {
		row, err = m.Store.Rollout(ctx, m.Operation.Name)
	}
	if err != nil {
		return false, err
	}
	c.enforced = !row.EnforcedAt.IsZero()
	return !c.enforced, nil
}

// plain runs the handler in a plain transaction (Store.InTx), buffering
// its response so a failed commit is never reported as success; caller,
// when known, is what Caller returns to the handler, and OperationID
// returns a fresh operation ID that no record holds.
func (m *Middleware) plain(w http.ResponseWriter, r *http.Request, next http.Handler, payload []byte, caller idem.Identity) {
	rw := newRecorder(w, 1<<62)
	err := m.Store.InTx(r.Context(), func(ctx context.Context, tx registry.Tx) error {
		// A fresh operation ID that no record holds, so that a handler
		// deriving resource IDs from it works as it does under enforce.
		e := &execution{tx: tx, payload: payload, caller: caller, plain: true, rec: registry.Record{OperationID: idem.NewOperationID(time.Now(), idem.ScopeHash{})}}
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
	case gone(r, err): // the client went away: its context ended the transaction
		// No record is kept here: say nothing about the outcome, and
		// nothing about retrying with the key (a retry executes again).
		m.log().Info("the client went away before its transaction ended", "operation", m.Operation.Name, "err", err)
		m.refuse(w, CodeClientGone, "the request ended before its transaction did", "")
	default:
		m.log().Error("business transaction failed", "operation", m.Operation.Name, "err", err)
		m.refuse(w, idem.CodeStoreUnavailable, "the request could not be committed", "")
	}
}
