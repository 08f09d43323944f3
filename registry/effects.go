package registry

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Effects outside the database (SPEC E1–E2). A downstream system that
// cannot join the local transaction is called like this:
//
//  1. BeginEffect(rec, name, request) commits, durably and fenced by the
//     owner generation, the effect attempt with its stable downstream key,
//     the request to send and an empty handle, and moves the record
//     RESERVED → EXECUTING;
//  2. only then the downstream call, with Effect.DownstreamKey as its
//     idempotency key;
//  3. RecordEffect stores the downstream's handle, result and answer once
//     the answer is evidence (package effect says what is); Complete
//     records the operation's outcome.
//
// An operation in the one-transaction style (operation.Config.
// OneTransaction with Effects) pays two durable commits per effect-bearing
// execution, the least any design that survives a crash can pay:
//
//  1. ReserveEffect(claim, name, request) inserts the scope's record
//     directly in EXECUTING — ∅ → EXECUTING, never seen RESERVED — with
//     its lease and owner generation 1, AND the first attempt with its
//     downstream key and request, in ONE durable transaction; the scope's
//     acceptance and the intent to call are one commit. When the scope
//     already has a record nothing is written and nothing may be sent;
//  2. the downstream call, as above;
//  3. CompleteEffects records the definite answers kept in memory since
//     the call and the operation's outcome in ONE durable transaction.
//
// A crash between the answer and step 3 leaves the attempt unsettled
// with its key durable: recovery settles it on evidence (a lookup by key,
// or a re-send with the same key), as after a crash during the call.
//
// If the answer of step 2 is no evidence (timeout, lost connection, 5xx,
// crash), MarkUnknown moves the record EXECUTING → UNKNOWN. An UNKNOWN
// record is never re-executed, taken over or completed: it leaves that
// state only through Reconcile, after the downstream was asked by key, the
// stored request was re-sent with the SAME key and definitely answered, or
// an operator decided with written evidence — and every reconciliation is
// logged.

// Effect results as stored by RecordEffect. Only evidence sets one: a
// definite answer of the downstream for the attempt's key.
const (
	// EffectSucceeded: the downstream executed the key.
	EffectSucceeded = "succeeded"
	// EffectFailed: the downstream refused the key with an answer its
	// contract defines as final for that key (a decline): it did not and
	// never will execute it.
	EffectFailed = "failed"
)

// Reconciliation methods (Reconciliation.Method).
const (
	// ReconcileProvider: the provider was asked for the effect by handle
	// or downstream key.
	ReconcileProvider = "provider"
	// ReconcileReplay: the downstream call was replayed with the same
	// downstream key and its answer decided the outcome.
	ReconcileReplay = "replay"
	// ReconcileOperator: a human decided (idem ops reconcile).
	ReconcileOperator = "operator"
)

// DefaultListLimit is the number of records ListOperations returns when
// ListFilter.Limit is zero or less.
const DefaultListLimit = 100

// downstreamKeyDomain separates downstream keys from every other hash of
// idem. It is deliberately not tied to the contract version: the key of an
// operation must never change, whatever version is running.
const downstreamKeyDomain = "idem/downstream-key"

// DownstreamKey returns the idempotency key to send downstream for the
// effect called name of an operation: "idem-" followed by the first 40
// hexadecimal digits (160 bits) of SHA-256 over the length-prefixed domain
// tag, operation ID and name. It is a pure function of its arguments, so
// every attempt of the effect — by any owner generation, after any
// takeover, in any process — sends the same key, and the provider executes
// the effect at most once. The operation ID is server-generated, never the
// client's key. The result is 45 visible ASCII characters.
func DownstreamKey(operationID, name string) string {
	sum := idem.HashStrings(downstreamKeyDomain, operationID, name)
	return "idem-" + hex.EncodeToString(sum[:])[:40]
}

// Effect is one effect attempt of an operation, as stored.
type Effect struct {
	OperationID string
	// Name names the effect within its operation ("transfer").
	Name string
	// DownstreamKey is DownstreamKey(OperationID, Name), fixed when the
	// attempt was first stored and never changed.
	DownstreamKey string
	// OwnerGen is the generation of the owner that last began the effect.
	OwnerGen int64
	// Handle is the provider's handle of the effect ("" until recorded).
	Handle string
	// Result is "" (not settled), EffectSucceeded or EffectFailed.
	Result string
	// Request is what was sent downstream, stored by BeginEffect before
	// the call and never changed, so the call can be re-sent with the same
	// key by whoever settles the effect.
	Request []byte
	// Answer is the downstream's definite answer, as it returned it (nil
	// until recorded, or when an operator settled without one).
	Answer    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// EffectAnswer is a downstream's answer to one begun effect, as
// CompleteEffects stores it with the outcome. Its fields mean what
// RecordEffect's arguments mean: an empty Handle or Result, or a nil
// Answer, keeps the stored one.
type EffectAnswer struct {
	// Name names the effect (Effect.Name).
	Name string
	// Handle is the provider's handle of the effect.
	Handle string
	// Result is EffectSucceeded or EffectFailed: only evidence sets one.
	Result string
	// Answer is the downstream's definite answer, as it returned it.
	Answer []byte
}

// Validate reports whether a can be stored.
func (a EffectAnswer) Validate() error {
	switch {
	case a.Name == "":
		return fmt.Errorf("registry: effect answer without a name")
	case a.Result != "" && a.Result != EffectSucceeded && a.Result != EffectFailed:
		return fmt.Errorf("registry: effect answer %s: result %q: want %q, %q or empty", a.Name, a.Result, EffectSucceeded, EffectFailed)
	}
	return nil
}

// Reconciliation is how an UNKNOWN operation was resolved.
type Reconciliation struct {
	// Outcome is idem.StateSucceeded or idem.StateFailedFinal.
	Outcome idem.State
	// Response is the snapshot stored (with its digest) and replayed from
	// now on: the operation's own rendering of its effects' results. It
	// must be storable (idem.Response.Storable): status 2xx or 4xx, body at
	// most idem.MaxStoredBody bytes.
	Response idem.Response
	// Outbox holds the messages to publish with the outcome, written in
	// the same transaction with IDs MessageID(operation ID, n).
	Outbox []Message
	// Method is ReconcileProvider, ReconcileReplay or ReconcileOperator.
	Method string
	// Actor names who reconciled: a worker or an operator. Required.
	Actor string
	// Evidence says why the outcome is right (provider answer, ticket…).
	// Required.
	Evidence string
}

// Validate reports whether r can be stored.
func (r Reconciliation) Validate() error {
	switch {
	case r.Outcome != idem.StateSucceeded && r.Outcome != idem.StateFailedFinal:
		return fmt.Errorf("registry: reconciliation outcome %q: want %s or %s", r.Outcome, idem.StateSucceeded, idem.StateFailedFinal)
	case r.Method != ReconcileProvider && r.Method != ReconcileReplay && r.Method != ReconcileOperator:
		return fmt.Errorf("registry: reconciliation method %q: want %s, %s or %s", r.Method, ReconcileProvider, ReconcileReplay, ReconcileOperator)
	case r.Actor == "":
		return fmt.Errorf("registry: reconciliation without an actor")
	case r.Evidence == "":
		return fmt.Errorf("registry: reconciliation without evidence")
	}
	if err := r.Response.Storable(); err != nil {
		return fmt.Errorf("registry: reconciliation: %w", err)
	}
	return nil
}

// ReconciliationEntry is one row of an operation's reconciliation log.
// The response is not repeated there: it is the record's.
type ReconciliationEntry struct {
	ID          int64
	OperationID string
	Outcome     idem.State
	Method      string
	Actor       string
	Evidence    string
	CreatedAt   time.Time
}

// ListFilter selects records for ListOperations.
type ListFilter struct {
	// State, when set, keeps records in that state only.
	State idem.State
	// OlderThan, when positive, keeps records created at least that long
	// before the store's "now" (database time unless injected).
	OlderThan time.Duration
	// Limit bounds the number of records; 0 or less means
	// DefaultListLimit.
	Limit int
	// After, when its OperationID is set, lists only records after it in
	// the listing order (created_at, then operation ID): pass the last
	// record of one page to read the next.
	After Record
}

// EffectStore records effects outside the database, unknown outcomes and
// their reconciliation (SPEC E1–E2, O2). Every Store implements it; its
// methods are safe for concurrent use, across processes too.
type EffectStore interface {
	// BeginEffect, in one transaction that is durable when BeginEffect
	// returns: checks that rec's record is still at rec.OwnerGen and
	// RESERVED or EXECUTING (else ErrFenced) and that rec.WriterEpoch is
	// not older than the registry's (else ErrWriterFenced); moves it to
	// EXECUTING; and inserts the attempt for name with
	// DownstreamKey(rec.OperationID, name), request and an empty handle —
	// or, when the attempt exists, returns it unchanged (same key, request,
	// handle and result) with its OwnerGen set to rec.OwnerGen. Call the
	// downstream system only after it returned nil, and send the returned
	// Effect.Request. Nothing is written on error.
	BeginEffect(ctx context.Context, rec Record, name string, request []byte) (Effect, error)
	// ReserveEffect is the acceptance point of an effect-bearing
	// operation in the one-transaction style, made at its first effect:
	// in one transaction that is durable when ReserveEffect returns, it
	// inserts the record for c in EXECUTING (never RESERVED) at owner
	// generation 1, with operation ID c.OperationID (a new one when ""),
	// lease c.LeaseOrDefault() and retention c.RetentionOrDefault() from
	// now, and the attempt for name with DownstreamKey(operation ID,
	// name), request and an empty handle. It returns Result{Execute, the
	// record} and the attempt as stored; call the downstream system only
	// then, and send the returned Effect.Request.
	//
	// When the scope has a record — or a concurrent call inserts it first
	// (the insert waits for that transaction) — NOTHING is written: the
	// result is Decide's verdict on the existing record (Replay, Conflict,
	// InProgress, Unknown or Retired) with a nil error and a zero Effect,
	// and the caller must not call the downstream. A new scope gets
	// ErrWriterFenced when c.WriterEpoch is older than the registry's
	// (an existing one still gets its verdict), and, with c.MaxActive
	// set, ErrActiveLimit when c.Owner holds that many active records of
	// c.Operation, as Reserve counts them. A missing record after a failed
	// insert returns the insert's error, never a verdict. Nothing is
	// written on error.
	ReserveEffect(ctx context.Context, c Claim, name string, request []byte) (Result, Effect, error)
	// CompleteEffects records, in one transaction that is durable when it
	// returns, the downstream's answers to rec's begun effects (for each:
	// handle, result and answer, as RecordEffect stores them, the attempt
	// passing to rec.OwnerGen) and rec's outcome out, as Complete records
	// it with no business function: the record moves from RESERVED or
	// EXECUTING to out.State with the response, its digest and the outbox
	// rows. Only if the record is still at rec.OwnerGen, in flight, and
	// rec.WriterEpoch is not older than the registry's; else ErrFenced or
	// ErrWriterFenced. An answer for an attempt that does not exist is
	// ErrFenced too. Nothing is written on error: the answers never commit
	// without the outcome, nor the outcome without them.
	CompleteEffects(ctx context.Context, rec Record, answers []EffectAnswer, out Outcome) (Record, error)
	// RecordEffect stores the downstream's handle, result (EffectSucceeded,
	// EffectFailed or "" for not yet known) and answer of the stored
	// attempt name and sets its OwnerGen to rec.OwnerGen, if the record is
	// still at rec.OwnerGen and EXECUTING or UNKNOWN; else (a stale
	// generation, a terminal record, no such attempt) ErrFenced. An empty
	// handle or result, or a nil answer, keeps the stored one. A recovery
	// that took the record over may record what it learnt from the
	// downstream without beginning the effect again.
	RecordEffect(ctx context.Context, rec Record, name, handle, result string, answer []byte) error
	// Effects lists an operation's effect attempts, oldest first; none is
	// not an error.
	Effects(ctx context.Context, operationID string) ([]Effect, error)
	// MarkUnknown moves rec's record EXECUTING → UNKNOWN if it is still at
	// rec.OwnerGen, for a downstream call whose outcome is not known; else
	// ErrFenced. It is never fenced by the writer epoch: recording that an
	// outcome is unknown is always allowed.
	MarkUnknown(ctx context.Context, rec Record) (Record, error)
	// Reconcile moves the UNKNOWN record of operationID to r.Outcome with
	// r.Response and its digest, inserts r.Outbox, and appends r to the
	// reconciliation log, in one durable transaction. ErrNotFound if there is no such record;
	// ErrFenced if it is not UNKNOWN (already reconciled, or never
	// unknown): of concurrent calls exactly one succeeds. It never runs
	// anything, and is fenced neither by an owner generation nor by the
	// writer epoch: the UNKNOWN state is its fence. An invalid r
	// (Validate) is an error, nothing written.
	Reconcile(ctx context.Context, operationID string, r Reconciliation) (Record, error)
	// Reconciliations lists an operation's reconciliation log, oldest
	// first.
	Reconciliations(ctx context.Context, operationID string) ([]ReconciliationEntry, error)
	// ListOperations lists the records f selects, oldest (created_at)
	// first, operation ID breaking ties.
	ListOperations(ctx context.Context, f ListFilter) ([]Record, error)
	// CountOperations counts the records f selects (f.State and
	// f.OlderThan; f.Limit and f.After are ignored), however many.
	CountOperations(ctx context.Context, f ListFilter) (int64, error)
}

// LimitOrDefault returns f.Limit, or DefaultListLimit when it is zero or
// less.
func (f ListFilter) LimitOrDefault() int {
	return cmp.Or(max(f.Limit, 0), DefaultListLimit)
}

// Validate reports whether f can be used.
func (f ListFilter) Validate() error {
	if f.State != "" && !f.State.Valid() {
		return fmt.Errorf("registry: list: unknown state %q", f.State)
	}
	if f.OlderThan < 0 {
		return fmt.Errorf("registry: list: negative age %v", f.OlderThan)
	}
	return nil
}
