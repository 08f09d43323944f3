package idemhttp

import (
	"errors"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// A retry that finds its operation UNKNOWN, or in flight under an owner
// whose lease expired, continues that operation — the same operation ID,
// never a new one (SPEC E2–E3).

// ActorClientRetry is the reconciliation actor of a settlement made while
// answering a client's retry.
const ActorClientRetry = "client retry"

// settleUnknown answers a same-fingerprint retry of an UNKNOWN
// effect-bearing operation: it tries to settle the operation on evidence
// (effect.Operation.Settle: a lookup by the downstream key, then a re-send
// of the stored request with the same key) and replays the rendered
// outcome if that worked; otherwise the operation stays UNKNOWN and the
// client gets 409 OUTCOME_UNKNOWN again. Storage trouble answers 503.
func (m *Middleware) settleUnknown(w http.ResponseWriter, r *http.Request, rec registry.Record) {
	op := &m.Operation
	ctx, stop := m.executionContext(r, rec)
	defer stop()
	s, err := op.Effects.Settle(ctx, m.Store, rec, ActorClientRetry)
	switch {
	case err != nil && errors.Is(err, registry.ErrUnavailable):
		m.refuseErr(w, r, err)
	case err != nil:
		m.log().Error("settling an unknown operation failed", "operation", op.Name, "operation_id", rec.OperationID, "err", err)
		m.refuseUnknown(w, rec)
	case s.Settled:
		if s.Method != "" {
			m.Metrics.outcome(op.Name, "reconciled")
			m.log().Info("unknown operation settled on evidence", "operation", op.Name, "operation_id", rec.OperationID,
				"state", s.Record.State, "method", s.Method, "actor", ActorClientRetry)
		}
		m.replay(w, s.Record)
	default:
		m.log().Info("unknown operation not settled", "operation", op.Name, "operation_id", rec.OperationID, "reason", s.Reason)
		m.refuseUnknown(w, rec)
	}
}

// leaseExpired reports whether rec's lease has run out by this process's
// clock. TakeOver decides on the database's clock; this only saves a
// write while the lease is plainly current.
func leaseExpired(rec registry.Record) bool {
	return !rec.LeaseUntil.IsZero() && time.Now().After(rec.LeaseUntil)
}

// takeOver gives an in-flight operation whose owner's lease expired to
// this request (Store.TakeOver: owner generation + 1, same operation ID).
// The old owner's late writes are fenced from then on. It reports true
// when the request must now execute the operation itself: nothing was
// committed and no effect outside the database was begun. An operation
// with a begun effect is never executed again: it is marked UNKNOWN and
// settled on evidence, as an UNKNOWN retry is. In every other case
// takeOver has answered the request.
func (m *Middleware) takeOver(w http.ResponseWriter, r *http.Request, rec registry.Record) (registry.Record, bool) {
	ctx := r.Context()
	mine, err := m.Store.TakeOver(ctx, rec, m.Operation.Lease)
	if errors.Is(err, registry.ErrFenced) {
		// Finished meanwhile, or another retry or the recovery worker
		// took it over: answer from the record as it is now.
		m.answerCurrent(w, r, rec)
		return registry.Record{}, false
	}
	if err != nil {
		m.refuseErr(w, r, err)
		return registry.Record{}, false
	}
	m.log().Warn("operation taken over from an owner whose lease expired", "operation", m.Operation.Name,
		"operation_id", mine.OperationID, "owner_gen", mine.OwnerGen, "state", mine.State)
	if m.Operation.Effects == nil {
		return mine, true
	}
	effs, err := m.Store.Effects(ctx, mine.OperationID)
	if err != nil {
		m.refuseErr(w, r, err) // ours until the new lease expires; the worker or a retry goes on
		return registry.Record{}, false
	}
	if len(effs) == 0 {
		return mine, true
	}
	unk, err := m.Store.MarkUnknown(ctx, mine)
	if err != nil {
		m.refuseErr(w, r, err)
		return registry.Record{}, false
	}
	m.settleUnknown(w, r, unk)
	return registry.Record{}, false
}

// answerCurrent answers from the record of rec's scope as it is now: a
// replay when it is terminal, else 409 as for any in-flight operation.
func (m *Middleware) answerCurrent(w http.ResponseWriter, r *http.Request, rec registry.Record) {
	now, err := m.Store.Get(r.Context(), rec.Scope)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		m.refuse(w, idem.CodeInProgress, "the operation is in progress", "")
		return
	case err != nil:
		m.refuseErr(w, r, err)
		return
	case now.Fingerprint != rec.Fingerprint:
		m.refuse(w, idem.CodePayloadConflict, "the key was used for a different request", "")
		return
	case now.State.Terminal():
		m.replay(w, now)
		return
	}
	code := idem.CodeInProgress
	if now.State == idem.StateUnknown {
		code = idem.CodeOutcomeUnknown
	}
	m.refuseInFlight(w, now.OperationID, code)
}
