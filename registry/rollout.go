package registry

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// Rollout per operation (seed 000): an operation is introduced into a
// live API in stages — shadow first, then enforce for a growing share of
// its callers — and every instance follows the stage the registry holds,
// within its refresh (idemhttp.Rollouts). The registry keeps one row per
// operation that an operator staged or that was ever enforced; the rules
// that decide a request's mode from the row are here (Rollout.ModeFor),
// the serving of each mode is in idemhttp.

// Rollout modes (Rollout.Mode).
const (
	// RolloutOff: no idempotency; allowed once the operation was enforced
	// only with RolloutChange.Force.
	RolloutOff = "off"
	// RolloutShadow: requests execute as without idempotency while their
	// records and what enforce would have answered are kept.
	RolloutShadow = "shadow"
	// RolloutEnforce: the contract, for the callers the ramp selects
	// (Percent, Allow, Deny); the others are in shadow.
	RolloutEnforce = "enforce"
	// RolloutReadOnly is never stored: it is the mode ModeFor gives an
	// instance that would serve an enforced operation off — replays and
	// monitor answers only, 503 READ_ONLY for new keys.
	RolloutReadOnly = "read-only"
)

// Bounds of a rollout's tenant lists.
const (
	MaxRolloutTenants    = 1000 // entries in Allow plus Deny
	MaxRolloutTenantSize = 200  // bytes of one tenant
)

// ErrRolloutStale: the operation's rollout changed since the version the
// change was based on (RolloutChange.Seen). Nothing was written; read it
// again and decide again. Of two operators racing from one version, at
// most one wins.
var ErrRolloutStale = errors.New("registry: the rollout changed since it was read")

// ErrForceRequired: the change would turn off an operation that has been
// enforced; that needs RolloutChange.Force. Nothing was written.
var ErrForceRequired = errors.New("registry: the operation has been enforced; turning it off needs force")

// Rollout is the rollout state of one operation. The zero value (Version
// 0) is an operation with no row: every instance serves it in its
// configured mode.
type Rollout struct {
	// Operation is the operation's name (idemhttp.Operation.Name).
	Operation string
	// Mode is RolloutOff, RolloutShadow or RolloutEnforce, or "" when no
	// operator set one (the row exists because the operation was
	// enforced by configuration): each instance then uses its configured
	// mode.
	Mode string
	// Percent is the share of callers enforced when Mode is
	// RolloutEnforce, 0 to 100, chosen by RampBucket: the callers
	// enforced at a lower percentage are always among those enforced at
	// a higher one, and one caller never flips back and forth while the
	// percentage holds.
	Percent int
	// ByPrincipal ramps by tenant and principal; false ramps whole
	// tenants.
	ByPrincipal bool
	// Allow lists tenants enforced whatever their bucket, Deny tenants
	// never enforced (served in shadow), when Mode is RolloutEnforce. No
	// tenant is in both.
	Allow, Deny []string
	// Forced says that Mode RolloutOff was set with force although the
	// operation had been enforced.
	Forced bool
	// EnforcedAt is when the operation was first enforced for any caller
	// (by a change that enforces someone, or by an instance configured to
	// enforce it: MarkEnforced); zero if never. Once set it never
	// changes: it is what makes an instance configured off serve the
	// operation read-only.
	EnforcedAt time.Time
	// Version rises by one with every change; 0 means no row.
	Version int64
	// UpdatedAt and UpdatedBy say when and by whom the row last changed
	// (UpdatedBy "" for MarkEnforced).
	UpdatedAt time.Time
	UpdatedBy string
}

// Enforcing reports whether r enforces at least one caller.
func (r Rollout) Enforcing() bool {
	return r.Mode == RolloutEnforce && (r.Percent > 0 || len(r.Allow) > 0)
}

// ModeFor returns the mode a request of id is served in under r, by an
// instance whose configured mode for the operation is configured
// (RolloutOff, RolloutShadow or RolloutEnforce): the row's mode when an
// operator set one — for RolloutEnforce, enforce for the callers the ramp
// selects and shadow for the others — else the configured one; and
// RolloutReadOnly instead of off for an operation that was ever enforced
// and not forced off.
func (r Rollout) ModeFor(configured string, id idem.Identity) string {
	mode := configured
	switch r.Mode {
	case RolloutEnforce:
		mode = RolloutShadow
		if r.Enforces(id) {
			mode = RolloutEnforce
		}
	case RolloutShadow, RolloutOff:
		mode = r.Mode
	}
	if mode == RolloutOff && !r.EnforcedAt.IsZero() && !r.Forced {
		return RolloutReadOnly
	}
	return mode
}

// Enforces reports whether the ramp of r selects id: a tenant in Deny
// never, one in Allow always, any other when its bucket is below Percent.
// It does not look at Mode.
func (r Rollout) Enforces(id idem.Identity) bool {
	switch {
	case slices.Contains(r.Deny, id.Tenant):
		return false
	case slices.Contains(r.Allow, id.Tenant):
		return true
	}
	principal := ""
	if r.ByPrincipal {
		principal = id.Principal
	}
	return RampBucket(r.Operation, id.Tenant, principal) < r.Percent*100
}

// RampBucket places a caller of an operation in one of 10000 buckets,
// by SHA-256 of the operation, the tenant and the principal (pass ""
// to ramp whole tenants): stable across processes, versions and
// restarts. A caller is enforced at P percent when its bucket is below
// P*100.
func RampBucket(operation, tenant, principal string) int {
	h := sha256.New()
	for _, s := range []string{"idem-rollout", operation, tenant, principal} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return int(binary.BigEndian.Uint64(h.Sum(nil)[:8]) % 10000)
}

// RolloutChange is an operator's change of one operation's rollout.
type RolloutChange struct {
	// Operation names the operation. Required.
	Operation string
	// Mode is RolloutOff, RolloutShadow or RolloutEnforce. Required.
	Mode string
	// Percent, ByPrincipal, Allow and Deny are stored as given (see
	// Rollout); Percent must be 0 to 100.
	Percent     int
	ByPrincipal bool
	Allow, Deny []string
	// Force allows Mode RolloutOff for an operation that was enforced.
	Force bool
	// Seen is the Version the operator saw (0: no row). The change is one
	// compare-and-set on it.
	Seen int64
	// Actor is who changes it; audited. Required.
	Actor string
	// Reason is free text for the audit entry; optional.
	Reason string
}

// Validate reports whether c can be applied: an operation and an actor,
// a known mode, Percent in range, force only with off, tenants valid
// UTF-8 without NUL or comma, within the bounds, none in both lists.
func (c RolloutChange) Validate() error {
	switch {
	case c.Operation == "" || len(c.Operation) > MaxAuditField || !utf8.ValidString(c.Operation) || strings.ContainsRune(c.Operation, 0):
		return errors.New("registry: rollout: an operation name of valid UTF-8 is required")
	case c.Actor == "":
		return errors.New("registry: rollout: an actor is required")
	case c.Mode != RolloutOff && c.Mode != RolloutShadow && c.Mode != RolloutEnforce:
		return fmt.Errorf("registry: rollout: unknown mode %q (off, shadow or enforce)", c.Mode)
	case c.Percent < 0 || c.Percent > 100:
		return fmt.Errorf("registry: rollout: percent %d is not within 0 to 100", c.Percent)
	case c.Force && c.Mode != RolloutOff:
		return errors.New("registry: rollout: force applies to off only")
	case len(c.Allow)+len(c.Deny) > MaxRolloutTenants:
		return fmt.Errorf("registry: rollout: more than %d tenants listed", MaxRolloutTenants)
	}
	for _, t := range append(slices.Clone(c.Allow), c.Deny...) {
		if t == "" || len(t) > MaxRolloutTenantSize || !utf8.ValidString(t) || strings.ContainsAny(t, "\x00,") {
			return fmt.Errorf("registry: rollout: invalid tenant %q", t)
		}
	}
	for _, t := range c.Allow {
		if slices.Contains(c.Deny, t) {
			return fmt.Errorf("registry: rollout: tenant %q is both allowed and denied", t)
		}
	}
	return nil
}

// Verdicts (VerdictCount.Verdict): what enforce answered, or in shadow
// would have answered, to a request.
const (
	VerdictExecute    = "execute"     // a new operation: executed
	VerdictReplay     = "replay"      // the stored answer
	VerdictConflict   = "conflict"    // 422 PAYLOAD_CONFLICT
	VerdictInFlight   = "in_flight"   // 409 IN_PROGRESS or OUTCOME_UNKNOWN
	VerdictKeyRefused = "key_refused" // 400: key missing, malformed or too weak
	VerdictKeyRetired = "key_retired" // 409 KEY_RETIRED
	VerdictRefused    = "refused"     // any other refusal of the request itself (401, 4xx payload)
)

// VerdictCount counts one verdict for one operation and tenant, as
// counted in one mode (RolloutShadow: predicted; RolloutEnforce:
// answered).
type VerdictCount struct {
	Operation, Tenant, Mode, Verdict string
	Count                            int64
	// UpdatedAt is when the count last grew; set by the store.
	UpdatedAt time.Time
}

// RolloutStore keeps the rollouts and the verdict counts. Every Store
// implements it; methods are safe for concurrent use, across processes
// too; ctx governs only the call.
type RolloutStore interface {
	// Rollouts returns every operation's row, ordered by operation.
	Rollouts(ctx context.Context) ([]Rollout, error)
	// Rollout returns the operation's row; with no row, Rollout{Operation:
	// operation} and a nil error.
	Rollout(ctx context.Context, operation string) (Rollout, error)
	// SetRollout applies c in one compare-and-set on c.Seen, and appends
	// the audit entry (action AuditRollout) in the same transaction: both
	// or neither. It sets EnforcedAt when the new state enforces someone
	// (Rollout.Enforcing) and it was unset. Errors: c invalid (Validate);
	// ErrRolloutStale when the row's version is not c.Seen;
	// ErrForceRequired for off without force on an enforced operation.
	SetRollout(ctx context.Context, c RolloutChange) (Rollout, error)
	// MarkEnforced records that an instance enforces the operation: it
	// sets EnforcedAt if unset (creating the row, with Mode "", if there
	// is none; raising Version when it changes the row) and returns the
	// row. Idempotent. A row an operator set off without force is left as
	// it is (no instance that follows it enforces the operation; the
	// returned row, Mode RolloutOff and EnforcedAt zero, says so).
	MarkEnforced(ctx context.Context, operation string) (Rollout, error)
	// AddVerdicts adds each count to its (operation, tenant, mode,
	// verdict) total, in one transaction.
	AddVerdicts(ctx context.Context, counts []VerdictCount) error
	// Verdicts returns the operation's totals, ordered by tenant, mode
	// and verdict.
	Verdicts(ctx context.Context, operation string) ([]VerdictCount, error)
}

// AuditRollout is the audit action of a rollout change (RolloutStore.SetRollout).
const AuditRollout = "rollout.set"
