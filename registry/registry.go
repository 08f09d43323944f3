package registry

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/idemkit/idem"
)

// Defaults for Claim fields left at zero.
const (
	DefaultLease     = 30 * time.Second
	DefaultRetention = 24 * time.Hour
)

// Errors returned by every Store. Drivers translate their database's
// errors into these at the driver boundary; any other error is a storage
// failure, which callers must treat as "nothing is known" (fail closed).
var (
	// ErrNotFound: no record with that scope or operation ID.
	ErrNotFound = errors.New("registry: record not found")
	// ErrFenced: the caller's owner generation or expected state is no
	// longer current — another owner took over, or the record moved on.
	// Nothing was written.
	ErrFenced = errors.New("registry: owner generation or state is stale")
	// ErrUnavailable wraps errors that mean the database could not be
	// reached or did not answer in time.
	ErrUnavailable = errors.New("registry: store unavailable")
	// ErrActiveLimit: Reserve refused to create a record because the
	// owner already holds Claim.MaxActive in-flight records of the
	// operation. Nothing was written.
	ErrActiveLimit = errors.New("registry: too many active keys")
)

// Claim is what a request asks of the registry.
type Claim struct {
	Scope       idem.ScopeHash
	Fingerprint idem.Fingerprint
	// OperationID, when set, is the operation ID a record this claim
	// inserts gets (made with idem.NewOperationID(now, Scope), so that it
	// leads to the record through the primary key; any other ID is kept
	// in the legacy-ID table and still found): a caller that showed
	// the ID before anything was stored — an effect-bearing execution in
	// the one-transaction style, whose handler runs before its record is
	// inserted (EffectStore.ReserveEffect) — stores the ID it showed.
	// "" (the default): the store makes a new one.
	OperationID string
	// Operation names the business operation, for listing and metrics.
	Operation string
	// Owner identifies the authenticated principal (OwnerOf); it lets the
	// operation status be shown to its owner only.
	Owner [32]byte
	// Tenant is the caller's tenant (idem.Identity.Tenant). The record
	// stores TenantHash(Tenant), never the tenant itself, so that a
	// tenant's records can be found, fenced and moved (tenant.go). Any
	// bytes are accepted; the empty tenant is a tenant like another.
	Tenant string
	// Lease is how long the claimant owns the operation before recovery
	// may take it over; 0 means DefaultLease.
	Lease time.Duration
	// Retention is how long the record is kept with its response after
	// it settles (retention.go); 0 means DefaultRetention.
	Retention time.Duration
	// WriterEpoch is the epoch of the writer making the claim.
	WriterEpoch int64
	// MaxActive, if positive, bounds the active records one owner may
	// hold for one operation — UNKNOWN ones, and RESERVED or EXECUTING
	// ones whose lease has not expired (an abandoned one stops counting
	// when its lease expires; a retry may still take it over): Reserve
	// refuses a new scope with ErrActiveLimit when the owner holds that
	// many. The check and the insert are one statement, so concurrent
	// reservations may overshoot the bound by at most the number of racing
	// requests; it is a guard against an unbounded registry, not a rate
	// limiter. 0 means no bound.
	MaxActive int
	// TombstoneTTL says what happens to the record's tombstone (retention.go).
	// 0, the safe default, keeps it forever: a retry with the key is refused
	// (Retired) however late it comes. A positive value declares that the
	// operation's old effects provably cannot reappear after that long, so
	// Prune deletes the tombstone TombstoneTTL after retiring the record and
	// the key is free again. Negative means 0.
	TombstoneTTL time.Duration
}

// LeaseOrDefault returns c.Lease, or DefaultLease when it is zero or
// negative.
func (c Claim) LeaseOrDefault() time.Duration {
	return LeaseOrDefault(c.Lease)
}

// RetentionOrDefault returns c.Retention, or DefaultRetention when it is
// zero or negative.
func (c Claim) RetentionOrDefault() time.Duration {
	return cmp.Or(max(c.Retention, 0), DefaultRetention)
}

// LeaseOrDefault returns lease, or DefaultLease when it is zero or
// negative. Drivers apply it to Claim.Lease and to the lease passed to
// TakeOver, ExtendLease and ClaimOutbox.
func LeaseOrDefault(lease time.Duration) time.Duration {
	return cmp.Or(max(lease, 0), DefaultLease)
}

// OwnerOf hashes an identity for Claim.Owner.
func OwnerOf(id idem.Identity) [32]byte {
	return id.Hash()
}

// Record is one operation record as stored.
type Record struct {
	Scope       idem.ScopeHash
	OperationID string
	Operation   string
	Owner       [32]byte
	Fingerprint idem.Fingerprint
	Contract    string
	State       idem.State
	// OwnerGen is the owner generation; it rises by one at every takeover.
	OwnerGen    int64
	WriterEpoch int64
	LeaseUntil  time.Time
	// ExpiresAt is when the record's retention ends: CreatedAt +
	// Claim.Retention while it is in flight or UNKNOWN, its settlement +
	// Claim.Retention once terminal (retention.go).
	ExpiresAt time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	// Response is the stored snapshot of a terminal record, nil otherwise
	// and nil for a tombstone. Drivers verify it against its stored digest
	// before returning it and return idem.ErrDigestMismatch if it does not
	// match.
	Response *idem.Response
	// RetiredAt is when Prune turned the record into a tombstone (response
	// dropped); zero while it is not one (see Retired, retention.go).
	RetiredAt time.Time
	// TombstoneUntil is when Prune may delete the tombstone; zero while the
	// record is not retired or when its tombstone is kept forever.
	TombstoneUntil time.Time
	// TombstoneTTL is the claim's TombstoneTTL (0: kept forever).
	TombstoneTTL time.Duration
	// TenantHash is TenantHash(Claim.Tenant) of the claim that made the
	// record; zero for a record made before tenants were recorded
	// ("unattributed").
	TenantHash [32]byte
}

// Outcome is what a business function decided: the terminal state, the
// response to store and replay, and the outbox messages to publish.
type Outcome struct {
	// State is idem.StateSucceeded, idem.StateFailedFinal or
	// idem.StateRejected.
	State    idem.State
	Response idem.Response
	Outbox   []Message
}

// Message is an outbox message. Its ID is derived from the operation ID
// and its position in Outcome.Outbox ("<operationID>/<n>"), so it is the
// same every time the same outcome is recorded and consumers can dedupe on
// it.
type Message struct {
	Topic   string
	Payload []byte
	// Trace is the W3C traceparent of the span that recorded the message
	// (the operation's core sets it from its context when that is
	// traced), stored with the message so that its delivery continues the
	// trace (docs/tracing.md); "" for none. It holds random IDs only,
	// never a key or a body, and is stored as it is (not sealed).
	Trace string
}

// OutboxMessage is a message as stored, with its stable ID and its
// delivery state (outbox.go).
type OutboxMessage struct {
	Seq         int64 // storage order
	ID          string
	OperationID string
	Topic       string
	Payload     []byte
	CreatedAt   time.Time
	// Trace is the message's stored W3C traceparent (Message.Trace), ""
	// for none.
	Trace string
	// Attempts counts the failed delivery attempts recorded so far.
	Attempts int
	// LastError is the error of the last failed attempt, "" if none.
	LastError string
	// LastAttemptAt is when the last failed attempt was recorded; zero if
	// none.
	LastAttemptAt time.Time
	// DeadAt is when the message became a dead letter; zero unless it is
	// one (claimed messages never are).
	DeadAt time.Time
	// PublishedAt is when a relay published the message; zero unless it
	// was (claimed and dead messages never are).
	PublishedAt time.Time
	// Unreadable is set, and Payload nil, when the Store has a key ring
	// and the stored payload does not open for this message (plaintext,
	// tampered, moved, or under a key the ring lacks): it wraps
	// ErrUnreadable (ErrTampered for all but a missing key). A relay never
	// delivers such a message; it makes it a dead letter.
	Unreadable error
}

// Tx is the business transaction handed to business functions. Queries
// use $1, $2 … placeholders on every driver. The ctx of each method
// governs that statement (for Query, the reading of its rows too), not
// the transaction, whose life belongs to the call that handed out the Tx.
// Errors of the statements are the driver's own, untranslated: they belong
// to the business code (a transaction that could not begin is reported as
// the driver's other errors are).
type Tx interface {
	// Exec runs a statement and returns the number of rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
	// QueryRow runs a query expected to return at most one row; its error,
	// the driver's "no rows" included, comes from Row.Scan.
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Query runs a query and returns its rows, in the order the query
	// gives them. The caller must Close the Rows (reading them to the end
	// is not enough on every driver) before the next statement on the Tx.
	// An error of the query is returned either by Query or, once Next has
	// returned false, by Rows.Err, depending on the driver and on when the
	// database reports it; a caller checks both. ctx governs the query and
	// the reading of its rows until they are closed: when it ends, Next
	// returns false and Err reports why.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// Native returns the driver's own transaction (pgx.Tx, *sql.Tx) for
	// code that needs it.
	Native() any
}

// Row is one result row.
type Row interface {
	Scan(dest ...any) error
}

// Rows is the result of Tx.Query, read one row at a time:
//
//	rows, err := tx.Query(ctx, "SELECT id, amount FROM payments WHERE payee = $1", payee)
//	if err != nil {
//		return err
//	}
//	defer rows.Close()
//	for rows.Next() {
//		if err := rows.Scan(&id, &amount); err != nil {
//			return err
//		}
//		…
//	}
//	return rows.Err()
//
// Rows is not safe for concurrent use.
type Rows interface {
	// Next advances to the next row and reports whether there is one; it
	// returns false at the end, after an error (see Err) and after Close.
	Next() bool
	// Scan copies the current row's columns into dest, one per column. A
	// failed Scan ends the iteration: Next then returns false and Err
	// returns the error.
	Scan(dest ...any) error
	// Err returns the error met while reading the rows (the query's own
	// included), nil if there was none; call it once Next returned false.
	Err() error
	// Close releases the rows; it must be called, also after Next returned
	// false, and may be called more than once. Closing before the last
	// row discards the rest.
	Close()
}

// BusinessFunc performs the business writes in tx and returns the outcome
// to record. Returning an error rolls everything back, the claim included
// in the in-transaction style.
type BusinessFunc func(ctx context.Context, tx Tx, rec Record) (Outcome, error)

// Store is implemented by every driver. All methods are safe for
// concurrent use; ctx governs only the call it is passed to.
type Store interface {
	// Controller is the control row: writer epoch and drain (control.go).
	Controller
	// Pruner retires expired records and deletes tombstones (retention.go).
	Pruner
	EffectStore // effects outside the database, UNKNOWN and reconciliation (effects.go)
	LeaseScanner
	OutboxDelivery // failed attempts, backoff and dead letters of the outbox (outbox.go)
	Auditor        // who did what: the audit log (audit.go)
	PruneLog       // recent pruning passes (retention.go)
	LookupLog      // every downstream lookup of an effect (lookups.go)
	ApprovalStore  // settlements waiting for a second operator (lookups.go)
	RolloutStore   // the rollout of each operation and its verdict counts (rollout.go)
	// Reserve is the two-phase acceptance point. It inserts a RESERVED
	// record for c, owned by generation 1, and commits — or, when the scope
	// exists, returns the existing record with created false. It never
	// reports a conflict as an error. With c.MaxActive set it may return
	// ErrActiveLimit instead of creating a record.
	Reserve(ctx context.Context, c Claim) (rec Record, created bool, err error)
	// Complete runs fn in a new transaction and, in that same transaction,
	// moves the record from RESERVED or EXECUTING to the outcome's state,
	// stores the response and its digest and inserts the outbox rows —
	// only if rec.OwnerGen is still the record's generation (else
	// ErrFenced, all rolled back). The commit is durable before Complete
	// returns.
	Complete(ctx context.Context, rec Record, fn BusinessFunc) (Record, error)
	// ExecuteOnce is the one-transaction style, for operations whose every
	// effect is a write in this database: fn runs in a new transaction
	// and the record for c is then inserted already in fn's terminal
	// state, with the response, its digest and the outbox rows, in that
	// same transaction, which commits durably. Nothing is in flight in the
	// registry meanwhile: no reservation, lease or owner to recover, and a
	// crash or an error rolls everything back. The insert is the
	// acceptance point: when the scope exists (or a concurrent call
	// inserts it first) everything fn wrote is rolled back and the result
	// is Decide's verdict on the existing record with a nil error, as for
	// a lost in-transaction claim; a missing record after a failed insert
	// returns the insert's error, never a conflict. The scope is claimed
	// before fn's first statement runs: a call for a scope whose first
	// call's transaction is still open waits for it to end, and when that
	// one committed, none of fn's statements runs (fn is not called, or
	// its first statement fails) — conformance OnceDuplicateWaitsForClaim.
	// fn sees the record as
	// it will be stored (a new operation ID, generation 1, state
	// EXECUTING). An error from fn, or an outcome that is not terminal
	// (SUCCEEDED, FAILED_FINAL, or REJECTED for a business refusal), rolls
	// back and is returned. c.Lease and c.MaxActive do not apply. A new scope gets
	// ErrWriterFenced when c.WriterEpoch is older than the registry's; an
	// existing one still gets its verdict.
	ExecuteOnce(ctx context.Context, c Claim, fn BusinessFunc) (Result, error)
	// Release deletes a RESERVED record still owned by rec.OwnerGen, so a
	// retry can run; ErrFenced if it is no longer so.
	Release(ctx context.Context, rec Record) error
	// TakeOver gives the record to a new owner generation if it is in
	// flight, still at rec.OwnerGen, and its lease has expired; the state
	// is kept and a new lease starts (LeaseOrDefault(lease) long).
	// ErrFenced otherwise.
	TakeOver(ctx context.Context, rec Record, lease time.Duration) (Record, error)
	// Get returns the record with that scope, or ErrNotFound.
	Get(ctx context.Context, scope idem.ScopeHash) (Record, error)
	// GetByID returns the record with that operation ID, or ErrNotFound.
	GetByID(ctx context.Context, operationID string) (Record, error)
	// ClaimOutbox claims up to limit pending messages (neither published
	// nor dead), oldest first, that no other relay holds and whose backoff
	// (OutboxDelivery) has passed, for LeaseOrDefault(lease); several
	// relays may call it at once and never get the same message while its
	// claim lasts.
	ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]OutboxMessage, error)
	// MarkPublished records that the messages were published.
	MarkPublished(ctx context.Context, ids []string) error
	// InTx runs fn in a new transaction and commits it if fn returns nil,
	// else rolls it back and returns fn's error. It is the plain business
	// transaction for code paths without an idempotent claim (shadow and
	// off modes, reads). The commit is durable.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
	// Close releases the store's connections.
	Close()
}

// Verdict is what a request may do given the record for its scope.
type Verdict int

const (
	// Execute: the request owns the operation and runs it.
	Execute Verdict = iota + 1
	// Replay: the operation is terminal; return its stored response.
	Replay
	// Conflict: the scope was used with a different fingerprint.
	Conflict
	// InProgress: the operation is in flight under another owner.
	InProgress
	// Unknown: the operation's outcome is unknown and awaits
	// reconciliation; nothing may re-run it.
	Unknown
	// Retired: the operation finished long ago and its record is a
	// tombstone; its response is gone, so it can be neither replayed nor
	// run again (retention.go).
	Retired
)

func (v Verdict) String() string {
	switch v {
	case Execute:
		return "execute"
	case Replay:
		return "replay"
	case Conflict:
		return "conflict"
	case InProgress:
		return "in_progress"
	case Unknown:
		return "unknown"
	case Retired:
		return "retired"
	}
	return "invalid"
}

// Decide returns the verdict for a request with fingerprint fp, given the
// record for its scope and whether this request just created it. A
// different fingerprint is a conflict whatever the state, so a conflict
// never reveals how far the first request got; the same fingerprint on a
// tombstone is Retired.
func Decide(rec Record, created bool, fp idem.Fingerprint) Verdict {
	switch {
	case rec.Fingerprint != fp:
		return Conflict
	case created:
		return Execute
	case rec.Retired():
		return Retired
	case rec.State.Terminal():
		return Replay
	case rec.State == idem.StateUnknown:
		return Unknown
	default:
		return InProgress
	}
}

// Result is what an in-transaction claim ended with: the verdict and the
// record it was decided on (the committed record when this call executed).
type Result struct {
	Verdict Verdict
	Record  Record
}

// MessageID returns the stable ID of the n-th outbox message of an
// operation.
func MessageID(operationID string, n int) string {
	return operationID + "/" + strconv.Itoa(n)
}
