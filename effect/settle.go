package effect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/tracing"
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
	// Pending, set by SettleByOperator when the decision waits for a
	// second operator's approval, is the stored request.
	Pending *registry.PendingSettlement
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
		a, result, resent, why, err := o.ask(ctx, store, *e, actor)
		if err != nil {
			return unsettled, fmt.Errorf("effect: settle %s: %w", rec.OperationID, err)
		}
		if result == "" {
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

// ask asks the downstream of e about its key: a lookup (recorded on the
// effect by Lookup, with actor), then, when that is no evidence, a re-send
// of the stored request. It returns the answer that decides, the result it
// proves ("" for none), whether it came from a re-send, and why it is no
// evidence. An error means the lookup could not be recorded.
func (o *Operation) ask(ctx context.Context, store registry.Store, e registry.Effect, actor string) (a Answer, result string, resent bool, why string, err error) {
	d := o.Downstreams[e.Name]
	if d == nil {
		return Answer{}, "", false, fmt.Sprintf("no downstream is configured for effect %s", e.Name), nil
	}
	a, l, err := o.Lookup(ctx, store, e, actor)
	if err != nil {
		return a, "", false, "", err
	}
	if result, ok := o.answerAt(a, e, l.At); ok {
		return a, result, false, "", nil
	}
	looked := a.Detail
	if _, ok := a.Evidence(); ok {
		looked += fmt.Sprintf(" (within the downstream's visibility window of %v after the effect began: no evidence)", o.window(e.Name))
	}
	if e.Request == nil {
		return a, "", false, fmt.Sprintf("%s: lookup of key %s: %s; no stored request to re-send", e.Name, e.DownstreamKey, looked), nil
	}
	a = Send(ctx, d, e.Name, e.DownstreamKey, e.Request) // trace.go
	if result, ok := o.answerAt(a, e, l.At); ok {
		return a, result, true, "", nil
	}
	return a, "", true, fmt.Sprintf("%s: lookup of key %s: %s; re-send: %s", e.Name, e.DownstreamKey, looked, a.Detail), nil
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
// or Declined; actor must not be empty and evidence must name something
// (CheckEvidence: CodeEvidenceRequired, CodeEvidenceTooWeak).
//
// The decision is checked against every definite answer recorded for the
// operation's effects — their stored results and their recorded lookups
// (Lookup), by whoever asked — and refused when it contradicts one
// (CodeContradictsEvidence): "failed" after any executed answer,
// "succeeded" after a declined one or with a handle other than a recorded
// executed handle. A "succeeded" without a handle takes the recorded one.
//
// "failed" without a recorded definite "declined" for every unsettled
// effect can cause a second payment, so it takes two people: it is stored
// as a pending request (registry.ApprovalStore.RequestSettlement) and
// nothing else changes; Settlement.Pending holds the request and Reason
// says it waits. A second, different operator settles it with
// ApproveByOperator. A request while another one is pending is refused
// (CodeApprovalPending), unless it is the same request again.
//
// Nothing is changed when it refuses. ctx bounds every call made.
func (o *Operation) SettleByOperator(ctx context.Context, store registry.Store, rec registry.Record, d Decision, actor, evidence string) (Settlement, error) {
	unsettled := Settlement{Record: rec}
	_, ok := Answer{Kind: d.Kind}.Evidence()
	switch {
	case !ok || d.Kind == NotFound:
		return unsettled, fmt.Errorf("effect: an operator decides %s or %s, not %s", Executed, Declined, d.Kind)
	case strings.TrimSpace(actor) == "":
		return unsettled, errors.New("effect: an operator's settlement needs an actor")
	case rec.State != idem.StateUnknown:
		return unsettled, fmt.Errorf("effect: settle %s: record is %s, not %s", rec.OperationID, rec.State, idem.StateUnknown)
	}
	if err := CheckEvidence(evidence); err != nil {
		return unsettled, err
	}
	effs, ev, err := o.recorded(ctx, store, rec)
	if err != nil {
		return unsettled, err
	}
	if err := contradiction(rec, effs, ev, d); err != nil {
		return unsettled, err
	}
	if d.Kind == Executed && d.Handle == "" {
		for _, e := range effs {
			if k := ev[e.Name]; e.Result == "" && len(k.handles) > 0 {
				d.Handle = k.handles[0]
			}
		}
	}
	if d.Kind == Declined && !declinedByEvidence(effs, ev) {
		return o.request(ctx, store, rec, d, actor, evidence)
	}
	return o.settleAs(ctx, store, rec, effs, d, registry.Reconciliation{
		Method: registry.ReconcileOperator, Actor: actor, Evidence: evidence,
	})
}

// recorded reads rec's effects and recorded lookups and sums up their
// definite answers.
func (o *Operation) recorded(ctx context.Context, store registry.Store, rec registry.Record) ([]registry.Effect, map[string]*known, error) {
	effs, err := store.Effects(ctx, rec.OperationID)
	if err != nil {
		return nil, nil, fmt.Errorf("effect: settle %s: %w", rec.OperationID, err)
	}
	if len(effs) == 0 {
		return nil, nil, fmt.Errorf("effect: settle %s: no effect attempt is stored, nothing to render", rec.OperationID)
	}
	lookups, err := store.Lookups(ctx, rec.OperationID)
	if err != nil {
		return nil, nil, fmt.Errorf("effect: settle %s: %w", rec.OperationID, err)
	}
	return effs, o.evidenceOf(effs, lookups), nil
}

// declinedByEvidence reports whether every unsettled effect has a recorded
// definite "declined".
func declinedByEvidence(effs []registry.Effect, ev map[string]*known) bool {
	for _, e := range effs {
		if e.Result == "" && !ev[e.Name].declined {
			return false
		}
	}
	return true
}

// settleAs stores d as the result of every effect of rec without one and
// reconciles rec with r (its outcome rendered by o.Render).
func (o *Operation) settleAs(ctx context.Context, store registry.Store, rec registry.Record, effs []registry.Effect, d Decision, r registry.Reconciliation) (Settlement, error) {
	unsettled := Settlement{Record: rec}
	result, _ := Answer{Kind: d.Kind}.Evidence()
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
	return o.reconcile(ctx, store, rec, effs, r)
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
	tracing.Stamp(ctx, r.Outbox) // the settlement's trace, when it is traced
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
