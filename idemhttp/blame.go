package idemhttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Whose failure is it: a request can fail for the store's sake (503,
// fail closed: afterFailedComplete, refuseErr), the client's (it went
// away before its request was accepted) or the handler's (its own
// statement failed). Only the first is ever answered or counted as
// storage trouble.

// gone reports whether err, the failure of serving r, is r's client
// going away: net/http cancelled its context (the connection closed or
// was half-closed, or the client was slower than the server's read
// timeout) and err is that cancellation. Timing alone is not enough: a
// store error that is not the cancellation (an outage, a lost commit
// reply) stays storage trouble even when the client left meanwhile, and a
// deadline the application put on the request is not the client going.
func gone(r *http.Request, err error) bool {
	return errors.Is(r.Context().Err(), context.Canceled) && errors.Is(err, context.Canceled)
}

// clientGone answers a request whose client went away before it was
// accepted (its context ended, net/http's sign that the connection
// closed or half-closed): nothing was accepted, so whatever the store
// call that failed had begun is as it would be after any failed call —
// rolled back, or a reservation left to its lease. It is logged at Info
// and counted as client_gone, never as storage trouble, and answered
// 499 CLIENT_GONE, which a client that only half-closed still reads.
func (m *Middleware) clientGone(w http.ResponseWriter, r *http.Request, err error) {
	m.log().Info("the client went away before the request was accepted", "operation", m.Operation.Name,
		"cause", context.Cause(r.Context()), "err", err)
	m.refuse(w, CodeClientGone, "the request ended before it was accepted; nothing was done — retry with the same key", "")
}

// storageTrouble reports whether err, a failure to record an outcome,
// means the store could not be reached or answered in time, or fenced
// the write: the failures that are not the handler's.
func storageTrouble(err error) bool {
	return errors.Is(err, registry.ErrUnavailable) || errors.Is(err, registry.ErrFenced) ||
		errors.Is(err, registry.ErrWriterFenced) || errors.Is(err, registry.ErrTenantMoved) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// handlerFailed answers an execution whose outcome could not be recorded
// because a statement of the handler failed (stmtErr) — on PostgreSQL
// the failed statement aborted the business transaction, so nothing the
// handler wrote, nor its outcome, could commit (err). That is the
// handler's error, never storage trouble: a reservation is released and
// the key is free again; a 4xx the handler answered is sent as it is
// (a refusal; not stored, so a retry executes afresh); any other answer
// claimed an outcome that did not commit, and becomes 500 HANDLER_ERROR.
// Counted as released or handler_error, never as store_error.
func (m *Middleware) handlerFailed(ctx context.Context, w http.ResponseWriter, rw *recorder,
	rec registry.Record, err, stmtErr error, reserved bool) {
	op := &m.Operation
	m.log().Error("a statement of the handler failed, so its transaction could not commit; nothing was recorded",
		"operation", op.Name, "operation_id", rec.OperationID, "status", rw.statusOrOK(), "statement_err", stmtErr, "err", err)
	if reserved {
		m.release(ctx, rec)
	}
	if s := rw.statusOrOK(); s >= 400 && s < 500 {
		m.Metrics.outcome(op.Name, "released")
		rw.flushTo(w, http.Header{HeaderContract: {idem.ContractVersion}})
		return
	}
	m.refuse(w, CodeHandlerError, "a statement of the handler failed and its transaction could not commit; nothing was recorded", "")
}
