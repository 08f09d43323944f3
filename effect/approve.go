package effect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// The two-person rule: "failed" settled by hand without a recorded
// definite "declined" can cause a second payment (the client is told
// nothing was transferred while the downstream may have executed it), so
// one operator requests it and a second, different one approves it.

// request stores d as rec's pending settlement (SettleByOperator), or
// finds the same request stored before.
func (o *Operation) request(ctx context.Context, store registry.Store, rec registry.Record, d Decision, actor, evidence string) (Settlement, error) {
	unsettled := Settlement{Record: rec}
	result, _ := Answer{Kind: d.Kind}.Evidence()
	want := registry.PendingSettlement{OperationID: rec.OperationID, Outcome: result, Handle: d.Handle,
		Evidence: strings.TrimSpace(evidence), RequestedBy: strings.TrimSpace(actor)}
	p, created, err := store.RequestSettlement(ctx, want)
	if err != nil {
		return unsettled, fmt.Errorf("effect: request settlement of %s: %w", rec.OperationID, err)
	}
	if !created && (p.Outcome != want.Outcome || p.Handle != want.Handle || p.RequestedBy != want.RequestedBy || p.Evidence != want.Evidence) {
		return unsettled, &OperatorError{CodeApprovalPending, fmt.Sprintf(
			"operation %s already has a settlement request by %s (outcome %s) waiting for approval: approve it, or settle it on a definite answer; nothing was changed",
			rec.OperationID, p.RequestedBy, p.Outcome)}
	}
	unsettled.Pending = &p
	unsettled.Reason = fmt.Sprintf("outcome %s without a recorded definite answer from the downstream: requested by %s, it waits for a second operator's approval",
		p.Outcome, p.RequestedBy)
	return unsettled, nil
}

// ApproveByOperator settles rec, an UNKNOWN record of o's operation, as
// its pending settlement request says, on the approval of approver, who
// must not be its requester (CodeSelfApproval). The approval is one
// compare-and-set (registry.ApprovalStore.ApproveSettlement): of
// concurrent approvals one wins, and the others are refused
// (CodeAlreadyApproved) — or, when the winner was the same approver (a
// retry after a failure), go on to the settlement, whose own
// compare-and-set settles the record once. Before approving, the request
// is checked again against every recorded definite answer
// (CodeContradictsEvidence: a lookup answered meanwhile). It refuses a
// record without a request (CodeNothingToApprove). The reconciliation is
// logged with method registry.ReconcileOperator, the actor "REQUESTER,
// approved by APPROVER" and the requester's evidence. Nothing is changed
// when it refuses. ctx bounds every call made.
func (o *Operation) ApproveByOperator(ctx context.Context, store registry.Store, rec registry.Record, approver string) (Settlement, error) {
	unsettled := Settlement{Record: rec}
	approver = strings.TrimSpace(approver)
	switch {
	case approver == "":
		return unsettled, &OperatorError{CodeActorRequired, "the actor is empty"}
	case rec.State != idem.StateUnknown:
		return unsettled, &OperatorError{CodeNotUnknown, fmt.Sprintf("operation %s is %s, not %s: nothing to approve; nothing was changed",
			rec.OperationID, rec.State, idem.StateUnknown)}
	}
	p, err := store.PendingSettlement(ctx, rec.OperationID)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return unsettled, &OperatorError{CodeNothingToApprove, fmt.Sprintf("operation %s has no settlement request waiting for approval", rec.OperationID)}
	case err != nil:
		return unsettled, fmt.Errorf("effect: approve %s: %w", rec.OperationID, err)
	case sameActor(p.RequestedBy, approver):
		return unsettled, &OperatorError{CodeSelfApproval, fmt.Sprintf(
			"%s requested this settlement and cannot approve it: a second operator must; nothing was changed", approver)}
	case p.ApprovedBy != "" && !sameActor(p.ApprovedBy, approver):
		return unsettled, alreadyApproved(rec, p)
	}
	d := Decision{Kind: Declined, Handle: p.Handle}
	if p.Outcome == registry.EffectSucceeded {
		d.Kind = Executed
	}
	effs, ev, err := o.recorded(ctx, store, rec)
	if err != nil {
		return unsettled, err
	}
	if err := contradiction(rec, effs, ev, d); err != nil {
		return unsettled, err
	}
	if p.ApprovedBy == "" {
		got, err := store.ApproveSettlement(ctx, rec.OperationID, approver)
		if errors.Is(err, registry.ErrFenced) {
			if now, err := store.PendingSettlement(ctx, rec.OperationID); err == nil && now.ApprovedBy != approver {
				return unsettled, alreadyApproved(rec, now)
			}
		} else if err != nil {
			return unsettled, fmt.Errorf("effect: approve %s: %w", rec.OperationID, err)
		} else {
			p = got
		}
	}
	return o.settleAs(ctx, store, rec, effs, d, registry.Reconciliation{
		Method: registry.ReconcileOperator, Actor: p.RequestedBy + ", approved by " + approver, Evidence: p.Evidence,
	})
}

func alreadyApproved(rec registry.Record, p registry.PendingSettlement) error {
	return &OperatorError{CodeAlreadyApproved, fmt.Sprintf(
		"the settlement of operation %s was approved by %s already; nothing was changed", rec.OperationID, p.ApprovedBy)}
}

// sameActor reports whether two actor names name the same person as far
// as names can tell: equal but for case and surrounding white space
// ("alice" and " Alice" are one operator, who cannot approve their own
// request).
func sameActor(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}
