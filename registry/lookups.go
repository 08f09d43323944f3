package registry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// What an operator's decision is checked against (issue 22): every
// lookup of an effect's downstream key, by whoever asked, is recorded on
// the effect (LookupLog); a decision that can cause a second payment — an
// UNKNOWN operation settled "failed" by hand without a recorded definite
// answer — waits for a second operator's approval (ApprovalStore). Package
// effect holds the rules; the stores only keep the facts.

// Answers of a recorded lookup (Lookup.Answer).
const (
	// LookupExecuted: the downstream executed the key (Lookup.Handle names
	// the effect).
	LookupExecuted = "executed"
	// LookupDeclined: the downstream refused the key for good.
	LookupDeclined = "declined"
	// LookupNotFound: no execution of the key was found.
	LookupNotFound = "not found"
	// LookupVoided: no execution was found and the downstream promises the
	// key can no longer execute.
	LookupVoided = "not found, voided"
	// LookupNoAnswer: the answer proves nothing (timeout, 5xx, unreadable).
	LookupNoAnswer = "no answer"
)

// Lookup is one recorded lookup of an effect's downstream key.
type Lookup struct {
	// Seq orders the lookups: set by RecordLookup, rising.
	Seq int64
	// OperationID and Effect name the effect attempt; DownstreamKey is the
	// key that was asked about. Required.
	OperationID   string
	Effect        string
	DownstreamKey string
	// Answer is one of the Lookup constants. Required.
	Answer string
	// Handle is the downstream's name of the executed effect ("" if none).
	Handle string
	// Detail says in a sentence what was asked and answered.
	Detail string
	// Actor is who asked: an operator's name, "recovery", "client retry".
	// Required.
	Actor string
	// At is when the answer came, by the store's clock; set by
	// RecordLookup.
	At time.Time
}

// Validate reports whether l can be recorded: every required field set,
// Answer one of the constants, every text valid UTF-8 without NUL and
// within its bound (MaxAuditField; Detail and Handle MaxAuditDetail).
func (l Lookup) Validate() error {
	switch {
	case l.OperationID == "" || l.Effect == "" || l.DownstreamKey == "" || l.Actor == "":
		return errors.New("registry: a lookup needs an operation ID, an effect, a downstream key and an actor")
	case l.Answer != LookupExecuted && l.Answer != LookupDeclined && l.Answer != LookupNotFound &&
		l.Answer != LookupVoided && l.Answer != LookupNoAnswer:
		return fmt.Errorf("registry: lookup answer %q: want executed, declined, not found, not found, voided or no answer", l.Answer)
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"lookup's operation ID", l.OperationID, MaxAuditField}, {"lookup's effect", l.Effect, MaxAuditField},
		{"lookup's downstream key", l.DownstreamKey, MaxAuditField}, {"lookup's actor", l.Actor, MaxAuditField},
		{"lookup's handle", l.Handle, MaxAuditField}, {"lookup's detail", l.Detail, MaxAuditDetail}} {
		if err := checkText(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

// Clipped returns l with its Detail and Handle made to fit (invalid UTF-8
// and NUL replaced, cut on a rune boundary): a downstream's answer is
// free text.
func (l Lookup) Clipped() Lookup {
	l.Detail = clipText(l.Detail, MaxAuditDetail)
	l.Handle = clipText(l.Handle, MaxAuditField)
	return l
}

// LookupLog records what downstreams answered when asked about effects.
// Every Store implements it; its methods are safe for concurrent use,
// across processes too. Recorded lookups are never changed; they are
// deleted only with their operation, when prune deletes its tombstone
// (the database refuses any other change or deletion, TRUNCATE included).
type LookupLog interface {
	// RecordLookup appends l, durably, and returns it with Seq and At
	// set. An invalid l (Validate) is an error and nothing is written.
	// The operation need not exist.
	RecordLookup(ctx context.Context, l Lookup) (Lookup, error)
	// Lookups lists an operation's recorded lookups, oldest first; none
	// is not an error.
	Lookups(ctx context.Context, operationID string) ([]Lookup, error)
}

// PendingSettlement is an operator's request to settle an UNKNOWN
// operation that waits for a second operator's approval.
type PendingSettlement struct {
	OperationID string
	// Outcome is EffectSucceeded or EffectFailed.
	Outcome string
	// Handle is the downstream's handle the request names ("" if none).
	Handle string
	// Evidence is the requester's written evidence. Required.
	Evidence string
	// RequestedBy names the requester. Required.
	RequestedBy string
	// RequestedAt is set by RequestSettlement (the store's clock).
	RequestedAt time.Time
	// ApprovedBy names the approver, "" while pending; never RequestedBy.
	ApprovedBy string
	// ApprovedAt is set by ApproveSettlement; zero while pending.
	ApprovedAt time.Time
}

// Validate reports whether p can be requested.
func (p PendingSettlement) Validate() error {
	switch {
	case p.OperationID == "" || p.Evidence == "" || p.RequestedBy == "":
		return errors.New("registry: a pending settlement needs an operation ID, evidence and a requester")
	case p.Outcome != EffectSucceeded && p.Outcome != EffectFailed:
		return fmt.Errorf("registry: pending settlement outcome %q: want %s or %s", p.Outcome, EffectSucceeded, EffectFailed)
	case p.ApprovedBy != "":
		return errors.New("registry: a new pending settlement is not approved")
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"pending settlement's operation ID", p.OperationID, MaxAuditField}, {"pending settlement's requester", p.RequestedBy, MaxAuditField},
		{"pending settlement's handle", p.Handle, MaxAuditField}, {"pending settlement's evidence", p.Evidence, MaxAuditDetail}} {
		if err := checkText(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

// ApprovalStore keeps the settlements that wait for a second operator:
// at most one per operation, ever. Every Store implements it; its
// methods are safe for concurrent use, across processes too. A request's
// fields never change after RequestSettlement; ApproveSettlement sets the
// approver once. Rows are deleted only with their operation by prune.
type ApprovalStore interface {
	// RequestSettlement stores p as the operation's pending settlement
	// and returns it with RequestedAt set and created true — or, when the
	// operation has one already (pending or approved), returns that one
	// unchanged with created false. An invalid p (Validate) is an error
	// and nothing is written.
	RequestSettlement(ctx context.Context, p PendingSettlement) (stored PendingSettlement, created bool, err error)
	// PendingSettlement returns the operation's settlement request;
	// ErrNotFound if it has none.
	PendingSettlement(ctx context.Context, operationID string) (PendingSettlement, error)
	// ApproveSettlement sets approver as the approver of the operation's
	// request, in one compare-and-set: only while it is not approved and
	// when approver is not its requester. ErrNotFound if there is no
	// request; ErrFenced if it is approved already or approver requested
	// it: of concurrent calls at most one succeeds.
	ApproveSettlement(ctx context.Context, operationID, approver string) (PendingSettlement, error)
}
