package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The audit log: who did what to the registry, in the order it
// was done. The reconciliation log (EffectStore.Reconciliations) records
// how each UNKNOWN outcome was settled, in the transaction that settled
// it; the audit log records everything else a person did — logging in to
// the console, asking a downstream for an effect, draining, bumping the
// writer epoch — and, for reconciliations, who asked.
//
// An entry is appended before the change it announces (write-ahead): a
// caller that cannot append it does not make the change. So every change
// made through the console or the CLI has its entry; an entry whose
// change then failed says so in a later entry of its own (AuditFailed).
// An entry is a request, not proof that its change happened: after a
// crash between the two, or a lost connection, it stands alone, and the
// registry's state (the control row, the operation's reconciliation log)
// says whether the change was made.

// Audit actions (AuditEntry.Action) written by idem itself. Callers may
// add their own: any non-empty text of at most MaxAuditField bytes.
const (
	AuditLogin           = "login"             // an operator logged in to the console
	AuditLogout          = "logout"            // an operator logged out
	AuditLookup          = "lookup"            // a downstream was asked for an effect by key; changes nothing
	AuditReconcile       = "reconcile"         // an operator settled an UNKNOWN operation
	AuditApprovalPending = "reconcile.pending" // the settlement an operator asked for waits for a second operator
	AuditApprove         = "reconcile.approve" // a second operator approved a pending settlement
	AuditDrainOn         = "drain.on"          // new operations refused (Controller.SetDraining)
	AuditDrainOff        = "drain.off"         // new operations accepted again
	AuditEpochBump       = "epoch.bump"        // the writer epoch raised (Controller.BumpEpoch)
	AuditFailed          = "failed"            // the change an earlier entry announced did not happen
	AuditOutboxRequeue   = "outbox.requeue"    // a dead letter made pending again (OutboxDelivery.RequeueOutbox)
	AuditTenantFence     = "tenant.fence"      // a tenant's writes refused here, as it moves away (TenantFencer.FenceTenant)
	AuditTenantUnfence   = "tenant.unfence"    // a tenant's fence lifted: its move was aborted before the switch
	AuditTenantImport    = "tenant.import"     // a moving tenant's records imported here (TenantCopier.ImportTenant)
)

// Bounds of an audit entry's texts, in bytes.
const (
	// MaxAuditField bounds Actor, Action and OperationID.
	MaxAuditField = 200
	// MaxAuditDetail bounds Detail.
	MaxAuditDetail = 4000
)

// DefaultAuditLimit is the number of entries AuditLog returns when
// AuditFilter.Limit is zero or less.
const DefaultAuditLimit = 100

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	// Seq orders the log: set by AppendAudit, rising with every entry.
	Seq int64
	// At is when the entry was appended, by the store's clock; set by
	// AppendAudit.
	At time.Time
	// Actor is who acted: the console's operator name; for the idem
	// commands, $USER (else "operator"). Required.
	Actor string
	// Action is what was done: one of the Audit constants or the
	// caller's own. Required.
	Action string
	// OperationID is the operation the action was about; "" for actions
	// on the whole registry.
	OperationID string
	// Detail is free text: what was asked, what was answered. It must
	// never hold a request payload or a secret.
	Detail string
}

// Validate reports whether e can be appended: Actor and Action set, every
// text valid UTF-8 without NUL and within its bound.
func (e AuditEntry) Validate() error {
	if e.Actor == "" || e.Action == "" {
		return errors.New("registry: audit entry needs an actor and an action")
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"audit entry's actor", e.Actor, MaxAuditField}, {"audit entry's action", e.Action, MaxAuditField},
		{"audit entry's operation ID", e.OperationID, MaxAuditField}, {"audit entry's detail", e.Detail, MaxAuditDetail}} {
		if err := checkText(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

// checkText reports whether v, named name, is valid UTF-8 without NUL of
// at most max bytes — what both drivers store as text.
func checkText(name, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("registry: %s is %d bytes, over %d", name, len(v), max)
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return fmt.Errorf("registry: %s is not valid UTF-8 text", name)
	}
	return nil
}

// clipText makes free text fit checkText's rules: invalid UTF-8 and NUL
// bytes replaced by "?", then cut to at most max bytes on a rune boundary.
func clipText(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}

// AuditFilter selects entries for AuditLog. The zero value selects the
// newest DefaultAuditLimit entries.
type AuditFilter struct {
	// OperationID, when set, keeps the entries about that operation.
	OperationID string
	// Before, when positive, keeps entries with a Seq below it: pass the
	// last entry's Seq of one page to read the next (older) one.
	Before int64
	// Limit bounds the number of entries; 0 or less means
	// DefaultAuditLimit.
	Limit int
}

// LimitOrDefault returns f.Limit, or DefaultAuditLimit when it is zero or
// less.
func (f AuditFilter) LimitOrDefault() int { return cmp.Or(max(f.Limit, 0), DefaultAuditLimit) }

// Auditor keeps the audit log. Every Store implements it; its methods are
// safe for concurrent use, across processes too. Entries are never changed
// or deleted (Prune leaves them, whatever happens to their operation).
type Auditor interface {
	// AppendAudit appends e, durably, and returns it with Seq and At set.
	// An invalid e (Validate) is an error and nothing is written.
	AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error)
	// AuditLog returns the entries f selects, newest (highest Seq) first.
	AuditLog(ctx context.Context, f AuditFilter) ([]AuditEntry, error)
}

// Clipped returns e with its Detail cut to MaxAuditDetail bytes (on a rune
// boundary) and invalid UTF-8 and NUL bytes replaced, so that free text
// such as an operator's evidence always fits.
func (e AuditEntry) Clipped() AuditEntry {
	e.Detail = clipText(e.Detail, MaxAuditDetail)
	return e
}

// failedEntryWait bounds the append of an AuditFailed entry, which does
// not end with the caller's context.
const failedEntryWait = 10 * time.Second

// Audited appends e to a's log (write-ahead, e.Clipped()) and only then
// runs change; when change fails it appends a second entry, by the same
// actor, with Action AuditFailed and the error, and returns change's
// error (joined with any error writing that entry). When e cannot be
// appended, change is not run and the error says so. A nil change only
// appends e. ctx governs the first append; the AuditFailed one outlives
// it by up to failedEntryWait (the change may have failed because ctx
// ended); change uses its own.
func Audited(ctx context.Context, a Auditor, e AuditEntry, change func() error) error {
	if _, err := a.AppendAudit(ctx, e.Clipped()); err != nil {
		return fmt.Errorf("registry: the audit entry could not be written, so %s was not done: %w", e.Action, err)
	}
	if change == nil {
		return nil
	}
	err := change()
	if err == nil {
		return nil
	}
	// The change may have failed because ctx ended; its failure is still
	// worth recording, within a bound of its own.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failedEntryWait)
	defer cancel()
	failed := AuditEntry{Actor: e.Actor, Action: AuditFailed, OperationID: e.OperationID, Detail: e.Action + ": " + err.Error()}
	if _, aerr := a.AppendAudit(fctx, failed.Clipped()); aerr != nil {
		return errors.Join(err, fmt.Errorf("registry: the audit entry of the failure could not be written: %w", aerr))
	}
	return err
}
