package registry

import (
	"errors"
	"fmt"
	"strings"
)

// What both drivers share of RolloutStore: the checks of a change
// against the row it replaces, the audit entry it writes and the
// validation of verdict counts.

// CheckRolloutChange reports whether c, already valid, may replace old,
// the operation's row as read in SetRollout's transaction: old.Version
// must be c.Seen (else ErrRolloutStale), and off on an operation that was
// enforced needs c.Force (else ErrForceRequired).
func CheckRolloutChange(old Rollout, c RolloutChange) error {
	switch {
	case old.Version != c.Seen:
		return fmt.Errorf("%w: %s is at version %d, the change was based on %d", ErrRolloutStale, c.Operation, old.Version, c.Seen)
	case c.Mode == RolloutOff && !c.Force && !old.EnforcedAt.IsZero():
		return fmt.Errorf("%w: %s was enforced at %s", ErrForceRequired, c.Operation, old.EnforcedAt.Format("2006-01-02T15:04:05Z07:00"))
	}
	return nil
}

// Result returns the row c makes, before the store sets EnforcedAt,
// Version, UpdatedAt: Forced only for off with force, EnforcedAt as old
// had it, UpdatedBy c.Actor.
func (c RolloutChange) Result(old Rollout) Rollout {
	return Rollout{
		Operation: c.Operation, Mode: c.Mode, Percent: c.Percent, ByPrincipal: c.ByPrincipal,
		Allow: c.Allow, Deny: c.Deny, Forced: c.Mode == RolloutOff && c.Force,
		EnforcedAt: old.EnforcedAt, Version: old.Version + 1, UpdatedBy: c.Actor,
	}
}

// RolloutAudit returns the audit entry of applying c to old, the row it
// was based on: Action AuditRollout, Actor c.Actor, no OperationID (a
// rollout is about an operation name, not one operation), and a Detail
// naming the operation, the old and the new state, force and the reason,
// e.g. "payments.create: shadow v3 → enforce 10% allow=[a] deny=[]
// by-principal=false force=false; reason: ramp". The drivers append it
// in SetRollout's transaction. The entry is Clipped.
func RolloutAudit(old Rollout, c RolloutChange) AuditEntry {
	from := old.Mode
	if from == "" {
		from = "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s v%d → %s %d%% allow=[%s] deny=[%s] by-principal=%t force=%t",
		c.Operation, from, old.Version, c.Mode, c.Percent,
		strings.Join(c.Allow, ","), strings.Join(c.Deny, ","), c.ByPrincipal, c.Force)
	if c.Reason != "" {
		b.WriteString("; reason: ")
		b.WriteString(c.Reason)
	}
	return AuditEntry{Actor: c.Actor, Action: AuditRollout, Detail: b.String()}.Clipped()
}

// Validate reports whether v can be added: operation, mode and verdict
// non-empty, every text valid UTF-8 without NUL of at most
// MaxAuditField bytes (the tenant of at most MaxAuditDetail, and it may
// be empty: a request refused before its caller was known), and a count
// of zero or more.
func (v VerdictCount) Validate() error {
	if v.Operation == "" || v.Mode == "" || v.Verdict == "" {
		return errors.New("registry: a verdict count needs an operation, a mode and a verdict")
	}
	if v.Count < 0 {
		return fmt.Errorf("registry: verdict count %d is negative", v.Count)
	}
	if err := checkText("verdict count's tenant", v.Tenant, MaxAuditDetail); err != nil {
		return err
	}
	for _, s := range []string{v.Operation, v.Mode, v.Verdict} {
		if err := checkText("verdict count's field", s, MaxAuditField); err != nil {
			return err
		}
	}
	return nil
}
