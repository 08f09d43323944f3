package effect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	// CodeEvidenceTooWeak: the written evidence names nothing that can be
	// checked (CheckEvidence says the rule).
	CodeEvidenceTooWeak = "EVIDENCE_TOO_WEAK"
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
	// CodeContradictsEvidence: the downstream gave a definite answer for
	// an effect of the operation — its stored result, or a recorded lookup
	// by anyone — that the decision contradicts. Nothing was changed.
	CodeContradictsEvidence = "CONTRADICTS_EVIDENCE"
	// CodeApprovalPending: the operation has another settlement request
	// waiting for approval. Nothing was changed.
	CodeApprovalPending = "APPROVAL_PENDING"
	// CodeNothingToApprove: the operation has no settlement request.
	CodeNothingToApprove = "NOTHING_TO_APPROVE"
	// CodeSelfApproval: the approver requested the settlement; a second
	// operator must approve it. Nothing was changed.
	CodeSelfApproval = "SELF_APPROVAL"
	// CodeAlreadyApproved: another operator approved the request already.
	// Nothing was changed.
	CodeAlreadyApproved = "ALREADY_APPROVED"
	// CodeEffectNotFound: the operation has no such effect attempt, or no
	// downstream is configured for it here (a lookup).
	CodeEffectNotFound = "EFFECT_NOT_FOUND"
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
	// Evidence says why the outcome is right and names something that can
	// be checked (CheckEvidence). Required.
	Evidence string
	// Actor names who decides. Required (not blank).
	Actor string
}

// Validate checks r without a store and returns the decision it asks
// for, or an *OperatorError (CodeOutcomeRequired, CodeEvidenceRequired,
// CodeEvidenceTooWeak, CodeActorRequired, CodeHandleNotAllowed).
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
	if err := CheckEvidence(r.Evidence); err != nil {
		return d, err
	}
	switch {
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
// trouble or a rendering bug. The evidence is stored trimmed. What
// Operation.SettleByOperator refuses it refuses too (CodeEvidenceTooWeak,
// CodeContradictsEvidence, CodeApprovalPending); a "failed" that takes a
// second operator returns with Settlement.Pending set and nil error, the
// record unchanged, and a registry.AuditApprovalPending entry.
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
	rec, op, err := s.operation(ctx, store, r.OperationID, true)
	if err != nil {
		return Settlement{Record: rec}, err
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
		if err == nil && st.Pending == nil && st.Method == "" {
			err = &OperatorError{CodeNotUnknown, fmt.Sprintf(
				"operation %s was settled meanwhile by someone else (now %s); nothing was changed", r.OperationID, st.Record.State)}
		}
		return err
	})
	if err == nil && st.Pending != nil {
		pending := registry.AuditEntry{Actor: actor, Action: registry.AuditApprovalPending, OperationID: r.OperationID, Detail: st.Reason}
		if _, err := store.AppendAudit(ctx, pending.Clipped()); err != nil {
			return st, fmt.Errorf("effect: the request is stored, but its audit entry could not be written: %w", err)
		}
	}
	return st, err
}

// ApproveByOperator settles the UNKNOWN operation id as its pending
// settlement request says, on the approval of actor, a second operator
// (Operation.ApproveByOperator): the one path "idem ops approve" and the
// console share. It refuses, with an *OperatorError and nothing changed,
// what SettleByOperator refuses (CodeNotFound, CodeNotUnknown,
// CodeNotSettleable) and what Operation.ApproveByOperator refuses. Before
// it changes anything it appends who approves to the audit log
// (registry.AuditApprove), and a registry.AuditFailed entry when the
// approval then fails. ctx bounds every call made.
func (s Set) ApproveByOperator(ctx context.Context, store registry.Store, id, actor string) (Settlement, error) {
	actor = strings.TrimSpace(actor)
	if actor == "" {
		return Settlement{}, &OperatorError{CodeActorRequired, "the actor is empty"}
	}
	rec, op, err := s.operation(ctx, store, id, true)
	if err != nil {
		return Settlement{Record: rec}, err
	}
	entry := registry.AuditEntry{Actor: actor, Action: registry.AuditApprove, OperationID: id, Detail: "approve the pending settlement"}
	st := Settlement{Record: rec}
	err = registry.Audited(ctx, store, entry, func() error {
		var err error
		st, err = op.ApproveByOperator(ctx, store, rec, actor)
		if err == nil && st.Method == "" {
			err = &OperatorError{CodeNotUnknown, fmt.Sprintf(
				"operation %s was settled meanwhile by someone else (now %s); nothing was changed", id, st.Record.State)}
		}
		return err
	})
	return st, err
}

// LookupResult is one answer of LookupByOperator.
type LookupResult struct {
	Answer Answer
	// Lookup is the answer as recorded on the effect.
	Lookup registry.Lookup
}

// LookupByOperator asks the downstream of the effect name of operation id
// (every effect of it when name is "") what it did with the effect's key,
// executing nothing, and records each answer on its effect
// (Operation.Lookup) with actor as who asked: the one path "idem ops
// lookup" and the console's "Ask the downstream" share. An operation in
// any state may be looked up. It refuses, with an *OperatorError, an
// operation that does not exist (CodeNotFound), whose kind s has no
// effects for (CodeNotSettleable), or that has no effect name with a
// configured downstream (CodeEffectNotFound). Before each question it
// appends to the audit log who asked about which key
// (registry.AuditLookup), and after it the answer (best effort: the
// lookup itself is recorded). Other errors are storage trouble; the
// results asked before one are returned with it. ctx bounds every call
// made.
func (s Set) LookupByOperator(ctx context.Context, store registry.Store, id, name, actor string) ([]LookupResult, error) {
	actor = strings.TrimSpace(actor)
	if actor == "" {
		return nil, &OperatorError{CodeActorRequired, "the actor is empty"}
	}
	rec, op, err := s.operation(ctx, store, id, false)
	if err != nil {
		return nil, err
	}
	effs, err := store.Effects(ctx, rec.OperationID)
	if err != nil {
		return nil, err
	}
	effs = slices.DeleteFunc(effs, func(e registry.Effect) bool {
		return (name != "" && e.Name != name) || op.Downstreams[e.Name] == nil
	})
	if len(effs) == 0 {
		what := "no effect with a downstream configured here"
		if name != "" {
			what = "no effect " + name + " with a downstream configured here"
		}
		return nil, &OperatorError{CodeEffectNotFound, fmt.Sprintf("operation %s has %s", id, what)}
	}
	var out []LookupResult
	for _, e := range effs {
		ask := registry.AuditEntry{Actor: actor, Action: registry.AuditLookup, OperationID: id, Detail: "ask " + e.Name + " for key " + e.DownstreamKey}
		if _, err := store.AppendAudit(ctx, ask); err != nil {
			return out, fmt.Errorf("effect: lookup not asked: its audit entry could not be written: %w", err)
		}
		a, l, err := op.Lookup(ctx, store, e, actor)
		if err != nil {
			return out, err
		}
		answer := registry.AuditEntry{Actor: actor, Action: registry.AuditLookup, OperationID: id,
			Detail: "answer of " + e.Name + " for key " + e.DownstreamKey + ": " + l.Answer + ", handle " + cmp.Or(a.Handle, "none") + "; " + a.Detail}
		_, _ = store.AppendAudit(ctx, answer.Clipped()) // best effort: the lookup is recorded on the effect
		out = append(out, LookupResult{Answer: a, Lookup: l})
	}
	return out, nil
}

// operation reads operation id and the effects s holds for its kind;
// with unknown, it must be UNKNOWN. Errors are *OperatorError
// (CodeNotFound, CodeNotUnknown, CodeNotSettleable) or storage trouble.
func (s Set) operation(ctx context.Context, store registry.Store, id string, unknown bool) (registry.Record, *Operation, error) {
	rec, err := store.GetByID(ctx, id)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return rec, nil, &OperatorError{CodeNotFound, fmt.Sprintf("operation %s not found", id)}
	case err != nil:
		return rec, nil, err
	case unknown && rec.State != idem.StateUnknown:
		return rec, nil, &OperatorError{CodeNotUnknown, fmt.Sprintf(
			"operation %s is %s, not %s: only operations whose outcome is unknown are reconciled; nothing was changed",
			id, rec.State, idem.StateUnknown)}
	}
	op := s[rec.Operation]
	if op == nil {
		return rec, nil, &OperatorError{CodeNotSettleable, fmt.Sprintf(
			"operation %s is a %s: no effects are configured for it here; settle it from its own service with effect.Operation.SettleByOperator; nothing was changed",
			id, rec.Operation)}
	}
	return rec, op, nil
}
