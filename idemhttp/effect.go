package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
)

// Effects outside the database (SPEC E1–E2).
//
// An operation whose handler calls a downstream system that cannot join
// the local transaction declares Operation.Effects. Its handler runs
// WITHOUT a business transaction (Tx returns nil): on SQLite the business
// transaction holds the single write lock, so the durable BeginEffect
// transaction could not commit while it is open, and a downstream call
// must never sit inside an open database transaction anyway. The handler
// calls Effect for every downstream call; the middleware then records the
// outcome with Store.Complete, whose transaction only stores the response
// and the outbox messages the handler queued.
//
// Status policy of an effect-bearing operation:
//
//   - 2xx is stored as SUCCEEDED, a declared 4xx as FAILED_FINAL, as for
//     every operation.
//   - If Effect marked the operation UNKNOWN (the downstream outcome is
//     not known), the client gets 409 OUTCOME_UNKNOWN with the monitor
//     Link and Idempotency-Operation, whatever the handler answered; a
//     retry gets the same until the operation is reconciled.
//   - Any other response (5xx, undeclared 4xx, panic, oversize) releases
//     the reservation, as for every operation, if no effect was begun.
//   - Once an effect was begun the record is EXECUTING and cannot be
//     released. If every begun effect was recorded as failed (the
//     downstream system said it executed nothing), the response is stored
//     as FAILED_FINAL and replayed: provably nothing happened, and a new
//     attempt needs a new key. Otherwise (some effect succeeded or has no
//     result) the operation is marked UNKNOWN and the client gets 409
//     OUTCOME_UNKNOWN: we cannot prove that nothing happened.

// ErrOutcomeUnknown wrapped in the error of an Effect call function says
// that the downstream call may have executed (a timeout or a lost
// connection after the request was sent). Effect then marks the operation
// UNKNOWN and returns an error wrapping ErrOutcomeUnknown.
var ErrOutcomeUnknown = errors.New("idemhttp: downstream outcome unknown")

// ErrEffectFailed wrapped in the error of an Effect call function says
// that the downstream system definitely executed nothing (it answered a
// deterministic failure). Effect records the attempt as failed and returns
// the call's error.
var ErrEffectFailed = errors.New("idemhttp: downstream effect failed")

// effectRun is the effect state of one effect-bearing execution.
type effectRun struct {
	store   registry.Store
	rec     registry.Record
	replay  map[string]registry.Effect // set when settling an UNKNOWN operation by replay (unknown.go)
	proof   []string                   // what the replayed calls answered, for the reconciliation log
	mu      sync.Mutex
	results map[string]string // begun effects: name → result ("" unknown)
	unknown bool              // the record was marked UNKNOWN
	fenced  bool              // MarkUnknown failed: the record's state is not ours to tell
}

type effectKey struct{}

func withEffects(ctx context.Context, er *effectRun) context.Context {
	return context.WithValue(ctx, effectKey{}, er)
}

// Effect runs one downstream call of an effect-bearing operation (SPEC
// E1): it durably stores the attempt with Store.BeginEffect, then calls
// call with the stable downstream key registry.DownstreamKey(operation ID,
// name), then records the handle and result with Store.RecordEffect.
// Calling Effect twice with the same name in one operation passes the same
// key. The failpoint after-downstream is hit after a successful call.
//
// If call's error wraps ErrEffectFailed, the attempt is recorded as failed
// and the error returned. Any other error — ErrOutcomeUnknown or anything
// unclassified, since it cannot be proved that nothing was sent — marks
// the operation UNKNOWN and returns an error wrapping ErrOutcomeUnknown;
// after that, Effect returns ErrOutcomeUnknown without calling anything.
// Outside an effect-bearing execution (Operation.Effects) it returns an
// error and calls nothing.
func Effect(ctx context.Context, name string, call func(ctx context.Context, downstreamKey string) (handle string, err error)) (string, error) {
	er, _ := ctx.Value(effectKey{}).(*effectRun)
	if er == nil {
		return "", errors.New("idemhttp: Effect called outside an effect-bearing operation")
	}
	if name == "" {
		return "", errors.New("idemhttp: Effect needs a name")
	}
	er.mu.Lock()
	defer er.mu.Unlock() // effects of one operation run one at a time
	if er.unknown || er.fenced {
		return "", ErrOutcomeUnknown
	}
	if er.replay != nil {
		return er.replayEffect(ctx, name, call)
	}
	eff, err := er.store.BeginEffect(ctx, er.rec, name)
	if err != nil {
		// Nothing was written and nothing called.
		return "", fmt.Errorf("idemhttp: beginning effect %s: %w", name, err)
	}
	if _, ok := er.results[name]; !ok {
		er.results[name] = eff.Result
	}
	handle, err := call(ctx, eff.DownstreamKey)
	if err == nil {
		err = failpoint.Hit(failpoint.AfterDownstream)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
	}
	switch {
	case err == nil:
		if rerr := er.store.RecordEffect(context.WithoutCancel(ctx), er.rec, name, handle, registry.EffectSucceeded); rerr != nil {
			// The effect happened but is not recorded: say so.
			er.results[name] = ""
			return "", er.markUnknown(ctx, fmt.Errorf("idemhttp: recording effect %s: %w", name, rerr))
		}
		er.results[name] = registry.EffectSucceeded
		return handle, nil
	case errors.Is(err, ErrEffectFailed) && !errors.Is(err, ErrOutcomeUnknown):
		if rerr := er.store.RecordEffect(context.WithoutCancel(ctx), er.rec, name, "", registry.EffectFailed); rerr != nil {
			er.results[name] = ""
			return "", er.markUnknown(ctx, fmt.Errorf("idemhttp: recording failed effect %s: %w", name, rerr))
		}
		er.results[name] = registry.EffectFailed
		return "", err
	default:
		er.results[name] = ""
		return "", er.markUnknown(ctx, err)
	}
}

// markUnknown moves the record to UNKNOWN and returns cause wrapped with
// ErrOutcomeUnknown. Called with er.mu held.
func (er *effectRun) markUnknown(ctx context.Context, cause error) error {
	if _, err := er.store.MarkUnknown(context.WithoutCancel(ctx), er.rec); err != nil {
		er.fenced = true
		return fmt.Errorf("%w: %w (marking it unknown failed: %v)", ErrOutcomeUnknown, cause, err)
	}
	er.unknown = true
	if errors.Is(cause, ErrOutcomeUnknown) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)
}

// state reports whether an effect was begun, whether every begun effect
// failed, and whether the record was marked UNKNOWN (or could not be).
func (er *effectRun) state() (begun, allFailed, unknown bool) {
	er.mu.Lock()
	defer er.mu.Unlock()
	allFailed = len(er.results) > 0
	for _, r := range er.results {
		if r != registry.EffectFailed {
			allFailed = false
		}
	}
	return len(er.results) > 0, allFailed, er.unknown || er.fenced
}

// executeEffects is execute for an effect-bearing operation: the handler
// runs without a business transaction, with Effect available; the outcome
// is then recorded by Complete (see the status policy above).
func (m *Middleware) executeEffects(w http.ResponseWriter, r *http.Request, next http.Handler, rec registry.Record, req Request, body []byte) {
	op := &m.Operation
	ctx, stop := m.executionContext(r, rec)
	defer stop()
	m.Metrics.inflight(op.Name, 1)
	defer m.Metrics.inflight(op.Name, -1)
	rw := newRecorder(w, op.maxResponseBody())
	e := &execution{rec: rec, caller: req.Identity, payload: req.Parts.Payload} // tx nil: Tx returns nil
	er := &effectRun{store: m.Store, rec: rec, results: map[string]string{}}
	perr := callHandler(next, rw, withBody(r.WithContext(withEffects(ctx, er)), e, body))
	if perr != nil {
		m.log().Error("handler panicked", "operation_id", rec.OperationID, "panic", perr)
	}
	begun, allFailed, unknown := er.state()
	if unknown {
		m.refuseUnknown(w, rec)
		return
	}
	status := rw.statusOrOK()
	state := op.stateFor(status)
	if state == "" && begun && allFailed {
		state = idem.StateFailedFinal // provably nothing happened downstream
	}
	var resp idem.Response
	tooLarge := rw.overflow
	if perr == nil && !tooLarge && state != "" {
		var err error
		if resp, err = idem.NewResponse(status, rw.header, rw.body.Bytes(), rw.max); err != nil {
			tooLarge = true
		}
	}
	if perr != nil || tooLarge || state == "" {
		if begun {
			m.markUnknown(ctx, w, rec, "the handler's response is not storable after a downstream call")
			return
		}
		m.release(ctx, rec)
		if tooLarge && perr == nil {
			m.refuse(w, CodeResponseTooLarge, "the response exceeds the size that can be stored for replay", "")
			return
		}
		m.Metrics.outcome(op.Name, "released")
		rw.flushTo(w, http.Header{HeaderContract: {idem.ContractVersion}})
		return
	}
	done, err := m.Store.Complete(ctx, rec, func(ctx context.Context, _ registry.Tx, _ registry.Record) (registry.Outcome, error) {
		if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
			return registry.Outcome{}, err
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		return registry.Outcome{State: state, Response: resp, Outbox: e.outbox}, nil
	})
	if err == nil {
		err = failpoint.Hit(failpoint.AfterCommit) // the outcome is committed either way
	}
	switch {
	case err == nil:
		m.Metrics.outcome(op.Name, "executed")
		m.log().Info("operation executed", "operation", op.Name, "operation_id", done.OperationID, "state", done.State, "status", status)
		rw.flushTo(w, http.Header{HeaderContract: {idem.ContractVersion}, HeaderOperation: {done.OperationID}})
	case !begun:
		m.afterFailedComplete(ctx, w, rec, err, true)
	default:
		m.log().Error("recording the outcome failed after a downstream call", "operation", op.Name, "operation_id", rec.OperationID, "err", err)
		if now, ok := m.settled(ctx, rec); ok {
			m.replay(w, now)
			return
		}
		m.markUnknown(ctx, w, rec, "the outcome could not be recorded after a downstream call")
	}
}

// markUnknown moves an EXECUTING record whose outcome cannot be stored to
// UNKNOWN and answers 409 OUTCOME_UNKNOWN; if even that fails it answers
// 503 STORE_UNAVAILABLE (the lease expires and recovery takes over; the
// record is never released).
func (m *Middleware) markUnknown(ctx context.Context, w http.ResponseWriter, rec registry.Record, why string) {
	if _, err := m.Store.MarkUnknown(ctx, rec); err != nil {
		m.log().Error("marking the operation unknown failed", "operation", m.Operation.Name, "operation_id", rec.OperationID, "why", why, "err", err)
		m.refuse(w, idem.CodeStoreUnavailable, "the outcome could not be recorded", rec.OperationID)
		return
	}
	m.log().Warn("operation outcome unknown", "operation", m.Operation.Name, "operation_id", rec.OperationID, "why", why)
	m.refuseUnknown(w, rec)
}

// refuseUnknown answers 409 OUTCOME_UNKNOWN for rec, as a retry would get.
func (m *Middleware) refuseUnknown(w http.ResponseWriter, rec registry.Record) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Link", "<"+m.monitor(rec.OperationID)+`>; rel="monitor"`)
	m.refuse(w, idem.CodeOutcomeUnknown, "the operation's outcome is unknown and awaits reconciliation", rec.OperationID)
}
