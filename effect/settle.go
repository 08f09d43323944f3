package effect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Settlement is what Settle or SettleByOperator ended with.
type Settlement struct {
	// Settled: the record is terminal, by this call or a concurrent one
	// (Record holds it).
	Settled bool
	// Record is the record after the call: terminal when Settled, else
	// as it was passed in.
	Record registry.Record
	// Method is the reconciliation method this call used
	// (registry.ReconcileProvider: every effect settled by lookup;
	// ReconcileReplay: one or more by re-sending; ReconcileOperator), ""
	// when it did not settle the record itself.
	Method string
	// Reason says why the operation is not settled ("" when it is).
	Reason string
}

// Settle tries to settle rec, an UNKNOWN record of o's operation, on
// evidence only (see the package documentation). Every effect without a
// result is first looked up by its key; a lookup that is no evidence is
// followed by a re-send of the attempt's stored request with the same key;
// an answer that is evidence is stored with the attempt (RecordEffect).
// When every effect is settled the outcome o.Render renders is stored with
// registry.Store.Reconcile (actor names who settled: "recovery", "client
// retry"), with the answers as evidence. Otherwise nothing more is
// written, the record stays UNKNOWN and Settlement.Reason says why.
//
// Any number of calls may settle one record at once, in any processes:
// they send the same key, store the same answers, and exactly one
// Reconcile wins; the others find the record settled. An error means
// storage trouble or a rendering bug; the record is then still UNKNOWN or
// settled by someone else. ctx bounds every call made.
func (o *Operation) Settle(ctx context.Context, store registry.Store, rec registry.Record, actor string) (Settlement, error) {
	unsettled := Settlement{Record: rec}
	if rec.State != idem.StateUnknown {
		return unsettled, fmt.Errorf("effect: settle %s: record is %s, not %s", rec.OperationID, rec.State, idem.StateUnknown)
	}
	effs, err := store.Effects(ctx, rec.OperationID)
	if err != nil {
		return unsettled, fmt.Errorf("effect: settle %s: %w", rec.OperationID, err)
	}
	if len(effs) == 0 {
		unsettled.Reason = "no effect attempt is stored: only an operator can settle it"
		return unsettled, nil
	}
	method := registry.ReconcileProvider
	var evidence []string
	for i := range effs {
		e := &effs[i]
		if e.Result != "" {
			evidence = append(evidence, fmt.Sprintf("%s: key %s was settled %s before", e.Name, e.DownstreamKey, e.Result))
			continue
		}
		a, resent, why := o.ask(ctx, *e)
		result, ok := a.Evidence()
		if !ok {
			unsettled.Reason = why
			return unsettled, nil
		}
		if resent {
			method = registry.ReconcileReplay
		}
		if err := store.RecordEffect(ctx, rec, e.Name, a.Handle, result, a.Body); err != nil {
			if errors.Is(err, registry.ErrFenced) {
				return settledElsewhere(ctx, store, rec)
			}
			return unsettled, fmt.Errorf("effect: settle %s: record %s: %w", rec.OperationID, e.Name, err)
		}
		e.Result, e.Answer = result, a.Body
		if a.Handle != "" {
			e.Handle = a.Handle
		}
		evidence = append(evidence, fmt.Sprintf("%s: key %s: %s", e.Name, e.DownstreamKey, a.Detail))
	}
	return o.reconcile(ctx, store, rec, effs, registry.Reconciliation{
		Method: method, Actor: actor, Evidence: strings.Join(evidence, "; "),
	})
}

// ask asks the downstream of e about its key: a lookup, then, when that is
// no evidence, a re-send of the stored request. It returns the answer that
// decides, whether it came from a re-send, and why it is no evidence.
func (o *Operation) ask(ctx context.Context, e registry.Effect) (a Answer, resent bool, why string) {
	d := o.Downstreams[e.Name]
	if d == nil {
		return Answer{}, false, fmt.Sprintf("no downstream is configured for effect %s", e.Name)
	}
	a = d.Lookup(ctx, e.DownstreamKey)
	if _, ok := a.Evidence(); ok {
		return a, false, ""
	}
	looked := a.Detail
	if e.Request == nil {
		return a, false, fmt.Sprintf("%s: lookup of key %s: %s; no stored request to re-send", e.Name, e.DownstreamKey, looked)
	}
	a = d.Send(ctx, e.DownstreamKey, e.Request)
	if _, ok := a.Evidence(); ok {
		return a, true, ""
	}
	return a, true, fmt.Sprintf("%s: lookup of key %s: %s; re-send: %s", e.Name, e.DownstreamKey, looked, a.Detail)
}

// Decision is an operator's finding about one effect: Executed with the
// downstream's handle, or Declined (it did not and never will execute).
type Decision struct {
	Kind   Kind
	Handle string
}

// SettleByOperator settles rec, an UNKNOWN record of o's operation, on an
// operator's written evidence: every effect without a result is stored as
// d says (its answer stays empty), the outcome is rendered by o.Render and
// stored with method registry.ReconcileOperator. d.Kind must be Executed
// or Declined; actor and evidence must not be empty. Effects settled
// before keep their result — the downstream's evidence — and a decision
// that contradicts one is refused (CodeContradictsEvidence), nothing
// changed. ctx bounds every call made.
func (o *Operation) SettleByOperator(ctx context.Context, store registry.Store, rec registry.Record, d Decision, actor, evidence string) (Settlement, error) {
	unsettled := Settlement{Record: rec}
	result, ok := Answer{Kind: d.Kind}.Evidence()
	switch {
	case !ok || d.Kind == NotFound:
		return unsettled, fmt.Errorf("effect: an operator decides %s or %s, not %s", Executed, Declined, d.Kind)
	case strings.TrimSpace(actor) == "" || strings.TrimSpace(evidence) == "":
		return unsettled, errors.New("effect: an operator's settlement needs an actor and written evidence")
	case rec.State != idem.StateUnknown:
		return unsettled, fmt.Errorf("effect: settle %s: record is %s, not %s", rec.OperationID, rec.State, idem.StateUnknown)
	}
	effs, err := store.Effects(ctx, rec.OperationID)
	if err != nil {
		return unsettled, fmt.Errorf("effect: settle %s: %w", rec.OperationID, err)
	}
	if len(effs) == 0 {
		return unsettled, fmt.Errorf("effect: settle %s: no effect attempt is stored, nothing to render", rec.OperationID)
	}
	for _, e := range effs {
		if e.Result != "" && e.Result != result {
			return unsettled, &OperatorError{CodeContradictsEvidence, fmt.Sprintf(
				"effect %s of operation %s already has the downstream's result %q, which the decision %q contradicts; nothing was changed",
				e.Name, rec.OperationID, e.Result, result)}
		}
	}
	for i := range effs {
		e := &effs[i]
		if e.Result != "" {
			continue
		}
		if err := store.RecordEffect(ctx, rec, e.Name, d.Handle, result, nil); err != nil {
			if errors.Is(err, registry.ErrFenced) {
				return settledElsewhere(ctx, store, rec)
			}
			return unsettled, fmt.Errorf("effect: settle %s: record %s: %w", rec.OperationID, e.Name, err)
		}
		e.Result = result
		if d.Handle != "" {
			e.Handle = d.Handle
		}
	}
	return o.reconcile(ctx, store, rec, effs, registry.Reconciliation{
		Method: registry.ReconcileOperator, Actor: actor, Evidence: evidence,
	})
}

// reconcile renders the outcome of rec from its settled effects and
// stores it with r's method, actor and evidence.
func (o *Operation) reconcile(ctx context.Context, store registry.Store, rec registry.Record, effs []registry.Effect, r registry.Reconciliation) (Settlement, error) {
	unsettled := Settlement{Record: rec}
	out, err := o.Outcome(rec, effs)
	if err != nil {
		return unsettled, err
	}
	r.Outcome, r.Response, r.Outbox = out.State, out.Response, out.Outbox
	done, err := store.Reconcile(ctx, rec.OperationID, r)
	if errors.Is(err, registry.ErrFenced) {
		return settledElsewhere(ctx, store, rec)
	}
	if err != nil {
		return unsettled, fmt.Errorf("effect: reconcile %s: %w", rec.OperationID, err)
	}
	return Settlement{Settled: true, Record: done, Method: r.Method}, nil
}

// Outcome renders rec's outcome from its settled effects with o.Render
// and checks that it may be stored: SUCCEEDED or FAILED_FINAL, with a
// storable response (idem.Response.Storable: status 2xx or 4xx, a 5xx is
// never stored; body at most idem.MaxStoredBody bytes). Every settlement path — the
// first execution's, a retry's, the worker's, an operator's — stores what
// it returns.
func (o *Operation) Outcome(rec registry.Record, effs []registry.Effect) (registry.Outcome, error) {
	out, err := o.Render(rec, effs)
	switch {
	case err != nil:
	case out.State != idem.StateSucceeded && out.State != idem.StateFailedFinal:
		err = fmt.Errorf("rendered state %s: want %s or %s", out.State, idem.StateSucceeded, idem.StateFailedFinal)
	default:
		err = out.Response.Storable()
	}
	if err != nil {
		return registry.Outcome{}, fmt.Errorf("effect: render %s: %w", rec.OperationID, err)
	}
	return out, nil
}

// settledElsewhere reads rec again after a fenced write: a concurrent
// settlement (or a takeover) moved it on.
func settledElsewhere(ctx context.Context, store registry.Store, rec registry.Record) (Settlement, error) {
	now, err := store.GetByID(ctx, rec.OperationID)
	if err != nil {
		return Settlement{Record: rec}, fmt.Errorf("effect: settle %s: read again: %w", rec.OperationID, err)
	}
	if now.State.Terminal() {
		return Settlement{Settled: true, Record: now}, nil
	}
	return Settlement{Record: now, Reason: "the record moved on meanwhile (" + string(now.State) + ", owner generation " +
		fmt.Sprint(now.OwnerGen) + ")"}, nil
}
