package effect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Codes of OperatorError: stable, for callers that branch on them
// (package console maps them to an HTTP status; "idem ops reconcile"
// checks the request with Validate before opening the store, and exits 1
// on the others).
const (
	// CodeOutcomeRequired: the outcome is neither "succeeded" nor "failed".
	CodeOutcomeRequired = "OUTCOME_REQUIRED"
	// CodeEvidenceRequired: the written evidence is empty (after trimming).
	CodeEvidenceRequired = "EVIDENCE_REQUIRED"
	// CodeActorRequired: the actor is empty (after trimming).
	CodeActorRequired = "ACTOR_REQUIRED"
	// CodeHandleNotAllowed: a handle names an executed effect; it does not
	// go with the outcome "failed".
	CodeHandleNotAllowed = "HANDLE_NOT_ALLOWED"
	// CodeNotFound: there is no operation with that ID.
	CodeNotFound = "NOT_FOUND"
	// CodeNotUnknown: the operation is not UNKNOWN (never was, or was
	// settled, possibly meanwhile by someone else). Nothing was changed.
	CodeNotUnknown = "NOT_UNKNOWN"
	// CodeNotSettleable: the Set has no effects for the operation's kind,
	// so its result cannot be rendered here. Nothing was changed.
	CodeNotSettleable = "NOT_SETTLEABLE"
	// CodeContradictsEvidence: an effect of the operation already has a
	// result from the downstream (its evidence) that the decision
	// contradicts. Nothing was changed.
	CodeContradictsEvidence = "CONTRADICTS_EVIDENCE"
)

// OperatorError is the error of OperatorRequest.Validate and
// Set.SettleByOperator that a caller branches on, by Code.
type OperatorError struct {
	Code string
	Msg  string
}

func (e *OperatorError) Error() string { return e.Msg }

// OperatorCode returns the Code of the OperatorError in err's chain, ""
// if there is none.
func OperatorCode(err error) string {
	if e, ok := errors.AsType[*OperatorError](err); ok {
		return e.Code
	}
	return ""
}

// OperatorRequest is an operator's decision about one UNKNOWN operation,
// as "idem ops reconcile" and the console (package console) take it.
type OperatorRequest struct {
	// OperationID names the operation.
	OperationID string
	// Outcome is "succeeded" (the downstream executed every unsettled
	// effect) or "failed" (it declined them for good); case does not
	// matter. Required.
	Outcome string
	// Handle is the downstream's ID of the executed effect, when known;
	// only with "succeeded". May be empty.
	Handle string
	// Evidence says why the outcome is right. Required (not blank).
	Evidence string
	// Actor names who decides. Required (not blank).
	Actor string
}

// Validate checks r without a store and returns the decision it asks
// for, or an *OperatorError (CodeOutcomeRequired, CodeEvidenceRequired,
// CodeActorRequired, CodeHandleNotAllowed).
func (r OperatorRequest) Validate() (Decision, error) {
	var d Decision
	switch strings.ToLower(strings.TrimSpace(r.Outcome)) {
	case "succeeded":
		d = Decision{Kind: Executed, Handle: strings.TrimSpace(r.Handle)}
	case "failed":
		d = Decision{Kind: Declined}
	default:
		return d, &OperatorError{CodeOutcomeRequired, fmt.Sprintf("outcome %q: want succeeded or failed", r.Outcome)}
	}
	switch {
	case strings.TrimSpace(r.Evidence) == "":
		return d, &OperatorError{CodeEvidenceRequired, "evidence is required: say why the outcome is right"}
	case strings.TrimSpace(r.Actor) == "":
		return d, &OperatorError{CodeActorRequired, "the actor is empty"}
	case d.Kind == Declined && strings.TrimSpace(r.Handle) != "":
		return d, &OperatorError{CodeHandleNotAllowed, "a handle names an executed effect: not with the outcome failed"}
	}
	return d, nil
}

// SettleByOperator settles the UNKNOWN operation r.OperationID on the
// operator's written evidence with the effects s holds for its kind
// (Operation.SettleByOperator): the one path "idem ops reconcile" and the
// console share. It refuses, with an *OperatorError and nothing changed,
// an invalid r (Validate), an operation that does not exist (CodeNotFound)
// or is not UNKNOWN (CodeNotUnknown — also when a concurrent settlement
// won meanwhile: of concurrent calls exactly one settles), or whose kind s
// has no effects for (CodeNotSettleable). Other errors are storage
// trouble or a rendering bug. The evidence is stored trimmed.
//
// Before it changes anything it appends to the audit log who asked for
// which outcome on what evidence (registry.AuditReconcile); when that
// append fails nothing is changed. A settlement that then fails gets a
// second entry (registry.AuditFailed) saying why. ctx bounds every call
// made.
func (s Set) SettleByOperator(ctx context.Context, store registry.Store, r OperatorRequest) (Settlement, error) {
	d, err := r.Validate()
	if err != nil {
		return Settlement{}, err
	}
	rec, err := store.GetByID(ctx, r.OperationID)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return Settlement{}, &OperatorError{CodeNotFound, fmt.Sprintf("operation %s not found", r.OperationID)}
	case err != nil:
		return Settlement{}, err
	case rec.State != idem.StateUnknown:
		return Settlement{Record: rec}, &OperatorError{CodeNotUnknown, fmt.Sprintf(
			"operation %s is %s, not %s: only operations whose outcome is unknown are reconciled; nothing was changed",
			r.OperationID, rec.State, idem.StateUnknown)}
	}
	op := s[rec.Operation]
	if op == nil {
		return Settlement{Record: rec}, &OperatorError{CodeNotSettleable, fmt.Sprintf(
			"operation %s is a %s: no effects are configured for it here; settle it from its own service with effect.Operation.SettleByOperator; nothing was changed",
			r.OperationID, rec.Operation)}
	}
	actor, evidence := strings.TrimSpace(r.Actor), strings.TrimSpace(r.Evidence)
	detail := "outcome " + strings.ToLower(strings.TrimSpace(r.Outcome))
	if d.Handle != "" {
		detail += ", handle " + d.Handle
	}
	entry := registry.AuditEntry{Actor: actor, Action: registry.AuditReconcile, OperationID: r.OperationID, Detail: detail + ": " + evidence}
	st := Settlement{Record: rec}
	err = registry.Audited(ctx, store, entry, func() error {
		var err error
		st, err = op.SettleByOperator(ctx, store, rec, d, actor, evidence)
		if err == nil && st.Method == "" {
			err = &OperatorError{CodeNotUnknown, fmt.Sprintf(
				"operation %s was settled meanwhile by someone else (now %s); nothing was changed", r.OperationID, st.Record.State)}
		}
		return err
	})
	return st, err
}
