package operation

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// Mode says how an operation is served. With a rollout source (the
// door's, for example idemhttp.Middleware.Rollouts) the registry's rollout row, when an operator set a
// mode, overrides it per request (docs/contract.md, "Rollout").
type Mode string

const (
	// Enforce (the default): replays, conflicts and in-flight answers as
	// the contract says.
	Enforce Mode = "enforce"
	// Shadow introduces idempotency without changing what clients get
	// while the operation has never been enforced: a new operation
	// executes exactly as under enforce — its record commits with its
	// business writes, so a later switch to enforce replays it and never
	// executes it again — while a request enforce would refuse (no key,
	// a bad key) or answer from a record (replay, conflict, in flight,
	// retired) executes plainly, without a record; what enforce would
	// have answered is counted (idem_rollout_verdicts_total). Once the
	// operation has been enforced (registry.Rollout.EnforcedAt) requests
	// that meet a record are answered as enforce answers them, so no
	// stored answer is lost. Storage trouble fails the request closed
	// (503), as in enforce: an execution without its record is not safe
	// to leave. An effect-bearing operation (Effects) never executes
	// plainly: only new operations execute; every other request is
	// answered as under enforce.
	Shadow Mode = "shadow"
	// Off passes requests through; handlers still get a plain business
	// transaction from Tx. With Middleware.Rollouts, an operation that
	// has been enforced and was not turned off with force is served
	// read-only instead (CodeReadOnly).
	Off Mode = "off"
)

// Config configures one idempotent operation. The zero values of its
// fields mean the documented defaults; Name and APIRevision are required.
// A Config must not be changed while a Core or a door uses it.
type Config struct {
	// Name names the business operation in scopes, metrics and logs,
	// for example "payments.create".
	Name string
	// APIRevision is the API major revision bound into the scope.
	APIRevision string
	// AcceptsRecordsOf, when set, names an older API revision whose
	// records this revision accepts as its own: the scope is computed
	// with it instead of APIRevision, so a retry that crosses the deploy
	// of this revision finds the first request's record — replayed, or
	// 422 PAYLOAD_CONFLICT when its fingerprint differs. Name the oldest
	// revision of the compatible family (v3 accepting v2, which accepted
	// v1, names v1). It must differ from APIRevision. "" (the default):
	// a new revision never replays, conflicts with or waits for an older
	// revision's operations (docs/contract.md §3).
	AcceptsRecordsOf string
	// Binding says what the fingerprint binds and how the payload is
	// canonicalised (canon mode, schema, significant query parameters,
	// business headers, body limit).
	Binding idem.Binding
	// KeyPolicy constrains Idempotency-Key values beyond the contract's
	// baseline.
	KeyPolicy idem.KeyPolicy
	// FinalStatuses lists the 4xx statuses that are deterministic business
	// refusals, stored and replayed: as REJECTED (refused after acceptance,
	// nothing happened) when the handler changed no row through the
	// business transaction and queued no outbox message, else — also when
	// in doubt — as FAILED_FINAL with its writes (writeTracker says what
	// counts as a change). 2xx responses are
	// always stored as SUCCEEDED. Every other status (5xx, undeclared
	// 4xx, 1xx, 3xx) releases the reservation and rolls the business
	// transaction back, so a retry runs afresh.
	FinalStatuses []int
	// Retention is how long records are kept with their response after
	// they settle (however long they were UNKNOWN before); 0 means
	// registry.DefaultRetention. After it a record becomes a tombstone and
	// a retry with its key is refused with 409 KEY_RETIRED. A reservation
	// nobody finished retires the same way a Retention after its lease
	// expired (registry/retention.go).
	Retention time.Duration
	// TombstoneTTL, when positive, declares that the operation's old
	// effects provably cannot reappear that long after its record retired
	// (no client, queue or restored backup will send the request again):
	// the tombstone is then deleted after TombstoneTTL and the key is free
	// for a new operation. 0, the safe default, keeps tombstones forever.
	// See registry.Claim.TombstoneTTL.
	TombstoneTTL time.Duration
	// Lease is how long an execution owns its operation before recovery
	// may take over; unless MaxDuration is longer, it also bounds the
	// handler's run time. 0 means registry.DefaultLease.
	Lease time.Duration
	// MaxDuration bounds one execution of the handler; 0 means the lease.
	// When it is longer than the lease, the middleware extends the lease
	// while the handler runs (a heartbeat every third of the lease), so
	// long handlers are not taken over by recovery. On SQLite a handler
	// that has written holds the single write lock, so its heartbeats wait
	// for its commit: give long same-database handlers a long Lease there.
	MaxDuration time.Duration
	// Mode is Enforce, Shadow or Off; "" means Enforce.
	Mode Mode
	// MaxActiveKeys bounds the in-flight operations one principal may
	// hold — UNKNOWN ones, and reservations whose lease has not expired
	// (registry.Claim.MaxActive); more answers 429 KEY_LIMIT. 0 means DefaultMaxActiveKeys;
	// negative means no bound.
	MaxActiveKeys int
	// MaxResponseBody caps a stored response body; 0 means
	// idem.DefaultMaxResponseBody. More than idem.MaxStoredBody is an
	// invalid Operation: no registry stores a larger body. A larger
	// response is not stored: the
	// business transaction rolls back and the client gets 500
	// RESPONSE_TOO_LARGE.
	MaxResponseBody int
	// Effects, when set, declares that the handler calls downstream
	// systems through Effect (SPEC E1–E2): the system of each effect and
	// the rendering of the operation's result from the effects' answers.
	// The handler then runs WITHOUT a business transaction — Tx returns
	// nil — and, once an effect was begun, the stored outcome is the
	// rendered one and the reservation is never released. A retry of an
	// UNKNOWN operation settles it on evidence when it can (effect.Settle).
	// See effects.go for the whole policy. In shadow, new operations run
	// their effects as under enforce (their downstream keys recorded) and
	// every other request is answered as enforce answers it; Off is
	// refused with Effects. nil: the operation has no effects outside the
	// database.
	Effects *effect.Operation
	// OneTransaction runs a first execution in ONE database transaction
	// (registry.Store.ExecuteOnce): the handler's writes, then the
	// record, inserted already terminal with the response and the outbox
	// messages, then the commit. Nothing is reserved beforehand, so a
	// first execution writes the registry once, there is no lease to
	// keep or recover, and a crash before the commit leaves nothing
	// behind. Use it for handlers whose every effect is a write in the
	// registry's database; it is the cheapest way to make them
	// idempotent. The default (false) is two-phase: the reservation
	// commits first, so duplicates see the operation in flight.
	//
	// What differs for clients: a duplicate that arrives while the first
	// request runs finds no record, so it is not refused as in progress.
	// On the same handler (in practice: the same server process) it
	// waits for the first execution (at most the wait cap; then 409
	// IN_PROGRESS), then reads the record and is answered from it
	// (the Observer's Join counts these waits). In another process on
	// PostgreSQL it runs the handler too, its record insert
	// waits for the first transaction to end, and then everything it
	// wrote is rolled back and it answers with the first request's stored
	// response (or 422 if its payload differs): its writes never commit,
	// but the handler's work is done twice. If the first request records
	// no outcome (5xx, panic), the duplicate runs the operation itself;
	// if the duplicate's own handler fails (5xx), that answer is sent. Records left in flight by two-phase writers
	// (during a rollout) are still answered as in flight.
	//
	// Lease and MaxActiveKeys do not apply (nothing is in flight in the
	// registry); the execution is bounded by MaxDuration, or by Lease
	// when that is longer.
	//
	// With Effects, the handler runs with nothing written; its first
	// Effect call stores the record, directly EXECUTING with its lease,
	// together with the effect's attempt and downstream key, in one
	// durable transaction (registry.EffectStore.ReserveEffect), and the
	// answer commits with the outcome (CompleteEffects): two commits per
	// execution where the two-phase style makes four. Lease and
	// MaxActiveKeys then apply from that first Effect on; a duplicate in
	// another process that arrives before it runs its handler too, and
	// its Effect returns ErrScopeTaken, sending nothing (onetxeffects.go).
	OneTransaction bool
	// ReplayCache, when on (Entries > 0), answers replays of settled
	// operations this Core has replayed before from memory
	// (replaycache.go: what a cached answer promises, and why a
	// retirement, a tombstone or a key ring change still wins). The zero
	// value is off: every replay reads the registry.
	ReplayCache ReplayCache
}

// DefaultMaxActiveKeys is the default per-principal bound on in-flight
// operations.
const DefaultMaxActiveKeys = 1000

// Validate reports the first invalid field of op, or nil.
func (op *Config) Validate() error {
	if op.Name == "" || op.APIRevision == "" {
		return fmt.Errorf("operation needs a Name and an APIRevision")
	}
	if op.MaxDuration < 0 || op.Lease < 0 {
		return fmt.Errorf("operation %s: negative Lease or MaxDuration", op.Name)
	}
	if op.Effects != nil {
		if err := op.Effects.Validate(); err != nil {
			return fmt.Errorf("operation %s: %w", op.Name, err)
		}
	}
	switch op.Mode {
	case "", Enforce, Shadow, Off:
	default:
		return fmt.Errorf("operation %s: unknown mode %q", op.Name, op.Mode)
	}
	if op.Effects != nil && op.EffectiveMode() == Off {
		// A plain execution would call the downstream under a key no
		// record holds: an effect nobody could settle on evidence.
		return fmt.Errorf("operation %s: Effects needs the enforce or shadow mode", op.Name)
	}
	if op.AcceptsRecordsOf != "" && (op.AcceptsRecordsOf == op.APIRevision || strings.TrimSpace(op.AcceptsRecordsOf) == "") {
		return fmt.Errorf("operation %s: AcceptsRecordsOf %q must name another, older API revision", op.Name, op.AcceptsRecordsOf)
	}
	if op.MaxResponseBody > idem.MaxStoredBody {
		return fmt.Errorf("operation %s: MaxResponseBody %d exceeds idem.MaxStoredBody (%d), what a registry stores", op.Name, op.MaxResponseBody, idem.MaxStoredBody)
	}
	if op.ReplayCache.Entries < 0 || op.ReplayCache.Bytes < 0 {
		return fmt.Errorf("operation %s: negative ReplayCache bound", op.Name)
	}
	// The retention the operation's claims carry, defaulted as the drivers default it.
	if retention := (registry.Claim{Retention: op.Retention}).RetentionOrDefault(); op.ReplayCache.On() && op.ReplayCache.margin() >= retention {
		// An entry is served only until its record's expiry minus the
		// margin, and a record expires Retention after it settles: such
		// a cache would hold answers and never serve one.
		return fmt.Errorf("operation %s: ReplayCache.Margin %v is not shorter than Retention %v: the cache would never serve an answer", op.Name, op.ReplayCache.margin(), retention)
	}
	if op.TombstoneTTL < 0 {
		return fmt.Errorf("operation %s: negative TombstoneTTL %v", op.Name, op.TombstoneTTL)
	}
	for _, s := range op.FinalStatuses {
		if s < 400 || s > 499 {
			return fmt.Errorf("operation %s: final status %d is not a 4xx", op.Name, s)
		}
	}
	return nil
}

// ScopeRevision is the revision the scope is computed with:
// AcceptsRecordsOf when set, else APIRevision.
func (op *Config) ScopeRevision() string { return cmp.Or(op.AcceptsRecordsOf, op.APIRevision) }

// EffectiveMode is Mode, or Enforce when Mode is "".
func (op *Config) EffectiveMode() Mode {
	if op.Mode == "" {
		return Enforce
	}
	return op.Mode
}

func (op *Config) maxActive() int { return orDefault(op.MaxActiveKeys, DefaultMaxActiveKeys) }

// ExecutionLimit bounds one execution of the handler: MaxDuration, or the
// lease when that is longer.
func (op *Config) ExecutionLimit() time.Duration {
	return max(op.MaxDuration, registry.LeaseOrDefault(op.Lease))
}

// MaxResponseBodyOrDefault is MaxResponseBody or, when that is zero or negative,
// its default.
func (op *Config) MaxResponseBodyOrDefault() int {
	return cmp.Or(max(op.MaxResponseBody, 0), idem.DefaultMaxResponseBody)
}

// StateFor returns the terminal state an answer with status is stored as,
// or "" when it releases the reservation instead: 2xx SUCCEEDED, a
// declared 4xx (FinalStatuses) FAILED_FINAL — or REJECTED when changed is
// false: the execution changed nothing (no write through its transaction,
// no outbox message) — and "" for every other status. Doors that are not
// HTTP map their answers onto these statuses.
func (op *Config) StateFor(status int, changed bool) idem.State {
	s := op.stateFor(status)
	if s == idem.StateFailedFinal && !changed {
		return idem.StateRejected // a refusal that changed nothing
	}
	return s
}

func (op *Config) stateFor(status int) idem.State {
	switch {
	case status >= 200 && status <= 299:
		return idem.StateSucceeded
	case status >= 400 && status <= 499:
		for _, s := range op.FinalStatuses {
			if s == status {
				return idem.StateFailedFinal
			}
		}
	}
	return ""
}

// Claim is the registry claim of a request of this operation.
func (op *Config) Claim(scope idem.ScopeHash, fp idem.Fingerprint, id idem.Identity, epoch int64) registry.Claim {
	return registry.Claim{
		Scope:       scope,
		Fingerprint: fp,
		Operation:   op.Name,
		Owner:       registry.OwnerOf(id),
		Tenant:      id.Tenant,
		Lease:       op.Lease,
		Retention:   op.Retention,
		WriterEpoch: epoch,
		// Stored with the claim: a later change of the Operation does not
		// change what an existing record declared.
		TombstoneTTL: op.TombstoneTTL,
		MaxActive:    op.maxActive(),
	}
}
