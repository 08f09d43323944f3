package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// replayEffect is Effect while settling an UNKNOWN operation by replay: it
// re-sends the call with the downstream key stored for name and starts no
// new effect. Called with er.mu held.
func (er *effectRun) replayEffect(ctx context.Context, name string, call func(ctx context.Context, downstreamKey string) (string, error)) (string, error) {
	eff, ok := er.replay[name]
	if !ok {
		er.fenced = true // a new effect during a replay: the outcome stays unknown
		return "", fmt.Errorf("%w: no attempt %q to replay", ErrOutcomeUnknown, name)
	}
	handle, err := call(ctx, eff.DownstreamKey)
	switch {
	case err == nil:
		if rerr := er.store.RecordEffect(context.WithoutCancel(ctx), er.rec, name, handle, registry.EffectSucceeded); rerr != nil {
			er.fenced = true
			return "", fmt.Errorf("%w: recording replayed effect %s: %w", ErrOutcomeUnknown, name, rerr)
		}
		er.proof = append(er.proof, fmt.Sprintf("%s: key %s re-sent, downstream answered handle %q", name, eff.DownstreamKey, handle))
		return handle, nil
	case errors.Is(err, ErrEffectFailed) && !errors.Is(err, ErrOutcomeUnknown):
		// A downstream system that honours the key and refuses it now
		// never executed it before either.
		if rerr := er.store.RecordEffect(context.WithoutCancel(ctx), er.rec, name, "", registry.EffectFailed); rerr != nil {
			er.fenced = true
			return "", fmt.Errorf("%w: recording replayed effect %s: %w", ErrOutcomeUnknown, name, rerr)
		}
		er.proof = append(er.proof, fmt.Sprintf("%s: key %s re-sent, downstream refused it", name, eff.DownstreamKey))
		er.results[name] = registry.EffectFailed
		return "", err
	default:
		er.fenced = true
		return "", fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
}

// settleByReplay answers a same-fingerprint retry of an UNKNOWN
// effect-bearing operation with Operation.ReplayUnknown: it runs the
// handler again in replay mode and, if every downstream call answered,
// records the outcome with Store.Reconcile (method "replay"). Concurrent
// retries may both replay (the downstream key makes that safe); one
// reconciliation wins and the others replay its stored outcome.
func (m *Middleware) settleByReplay(w http.ResponseWriter, r *http.Request, next http.Handler, rec registry.Record, req Request, body []byte) {
	op := &m.Operation
	ctx, stop := m.executionContext(r, rec)
	defer stop()
	effs, err := m.Store.Effects(ctx, rec.OperationID)
	if err != nil {
		m.refuseErr(w, err)
		return
	}
	er := &effectRun{store: m.Store, rec: rec, results: map[string]string{}, replay: map[string]registry.Effect{}}
	for _, e := range effs {
		er.replay[e.Name] = e
	}
	rw := newRecorder(w, op.maxResponseBody())
	e := &execution{rec: rec, caller: req.Identity, payload: req.Parts.Payload}
	perr := callHandler(next, rw, withBody(r.WithContext(withEffects(ctx, er)), e, body))
	status := rw.statusOrOK()
	state := op.stateFor(status)
	_, allFailed, unknown := er.state()
	if state == "" && allFailed && len(er.proof) == len(effs) {
		state = idem.StateFailedFinal
	}
	var resp idem.Response
	if perr == nil && !unknown && !rw.overflow && state != "" {
		resp, err = idem.NewResponse(status, rw.header, rw.body.Bytes(), rw.max)
	}
	if perr != nil || unknown || rw.overflow || state == "" || err != nil {
		m.refuseUnknown(w, rec)
		return
	}
	done, err := m.Store.Reconcile(ctx, rec.OperationID, registry.Reconciliation{
		Outcome: state, Response: resp, Method: registry.ReconcileReplay,
		Actor: "client retry", Evidence: strings.Join(er.proof, "; "),
	})
	switch {
	case err == nil:
		m.Metrics.outcome(op.Name, "reconciled")
		m.log().Info("unknown operation settled by replay", "operation", op.Name, "operation_id", done.OperationID, "state", done.State)
		rw.flushTo(w, http.Header{HeaderContract: {idem.ContractVersion}, HeaderOperation: {done.OperationID}})
	case errors.Is(err, registry.ErrFenced):
		if now, ok := m.settled(ctx, rec); ok {
			m.replay(w, now) // another retry or the worker settled it first
			return
		}
		m.refuseUnknown(w, rec)
	default:
		m.refuseErr(w, err)
	}
}
