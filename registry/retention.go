package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
)

// Retention (SPEC E5). A record is kept with its response until its
// ExpiresAt: Claim.Retention after it settled — the statement that makes
// it terminal (Complete, the one-transaction insert, Reconcile) sets
// ExpiresAt to its own instant plus the retention, however long the
// record was in flight or UNKNOWN before (until then ExpiresAt is the
// creation plus the retention, which is how the drivers know the
// retention at settlement). After that, Prune
// retires it: the record becomes a tombstone that keeps the scope, the
// fingerprint, the operation ID and the final state, and drops the stored
// response. A retry that finds a tombstone gets the verdict Retired (HTTP
// 409 KEY_RETIRED with the operation ID) — it is neither replayed nor run
// again — and a retry with a different fingerprint still gets Conflict.
//
// A tombstone is kept forever unless its claim declared, with
// Claim.TombstoneTTL, that the operation's old effects provably cannot
// reappear (say, the client's retry window and every queue that may
// redeliver the request are shorter than the TTL). Only then does Prune
// delete the tombstone, TombstoneTTL after it retired the record; the key
// is free again from then on and a request with it is a new operation.
//
// Terminal records (SUCCEEDED, FAILED_FINAL, REJECTED) are retired a
// retention after they settled. An abandoned reservation — RESERVED or
// EXECUTING, no effect attempt recorded (so nothing of it committed), its
// lease expired a full retention ago (LeaseUntil + ExpiresAt - CreatedAt)
// — is retired on the same clock into a tombstone that keeps its state:
// a retry gets Retired, and the key never runs again. A RESERVED record
// whose lease expired less long ago still awaits its owner or a retry's
// takeover; the retirement and a takeover are compare-and-sets on the
// same row, so exactly one of them wins. An EXECUTING record with an
// effect attempt awaits recovery (which makes it UNKNOWN). UNKNOWN records
// are never retired: they await reconciliation, and are retired only a
// retention after they settle.
//
// The drivers' migrations make the database enforce this: the only change
// it accepts to a terminal record is its retirement (response dropped,
// state and identity kept) or a re-seal, the only retirement of a record
// in flight is that of an abandoned reservation (checked on the row: no
// effect attempt, RetiredAt at least a retention after LeaseUntil), a
// tombstone never changes, and the only records that may be deleted are
// live reservations (Store.Release) and tombstones with a deletion time.

// DefaultPruneBatch is the batch size of the scheduled prune of
// "idem serve" and the default of "idem prune --batch".
const DefaultPruneBatch = 1000

// PruneResult counts what one Prune call did.
type PruneResult struct {
	// Retired is the number of expired terminal records and abandoned
	// reservations turned into tombstones.
	Retired int `json:"retired"`
	// Deleted is the number of tombstones deleted (TombstoneTTL elapsed).
	Deleted int `json:"deleted"`
}

// Add returns the sum of r and o.
func (r PruneResult) Add(o PruneResult) PruneResult {
	return PruneResult{Retired: r.Retired + o.Retired, Deleted: r.Deleted + o.Deleted}
}

// Pruner retires expired records and deletes expired tombstones. Every
// Store implements it. Its method is safe for concurrent use, across
// processes too, and against concurrent retries of the records it prunes.
type Pruner interface {
	// Prune, in one durable transaction, retires up to limit terminal
	// records (SUCCEEDED, FAILED_FINAL, REJECTED) whose ExpiresAt is at
	// or before the store's "now", oldest expiry first — their response
	// is dropped, RetiredAt set, and TombstoneUntil set to RetiredAt +
	// TombstoneTTL when the claim gave one — and up to limit abandoned
	// reservations (see above), oldest lease first, the same way with
	// their state kept (Retired counts both), and deletes up to limit
	// tombstones whose TombstoneUntil is at or before "now", together
	// with their published outbox messages (unpublished ones are kept for
	// the relay), their effect, reconciliation, lookup and pending
	// settlement rows, and their recovery attempts. A record
	// retired by a call is never deleted by the same call. In-flight and
	// UNKNOWN records are never touched. Concurrent calls work on
	// disjoint records (rows another call holds are skipped, not waited
	// for); a retirement and a concurrent TakeOver of the same abandoned
	// reservation never both succeed. limit <= 0 does nothing.
	Prune(ctx context.Context, limit int) (PruneResult, error)
}

// Retired reports whether the record is a tombstone: retired by Prune, its
// response dropped (Response is nil).
func (r Record) Retired() bool { return !r.RetiredAt.IsZero() }

// PruneAll calls p.Prune with batch until a call retires and deletes
// fewer than batch records each — nothing due is left that a concurrent
// pruner does not hold — or ctx ends, and returns the sums. each, if not
// nil, is called after every batch. On error it returns the sums so far
// with the error. batch <= 0 means DefaultPruneBatch.
func PruneAll(ctx context.Context, p Pruner, batch int, each func(PruneResult)) (PruneResult, error) {
	batch = cmp.Or(max(batch, 0), DefaultPruneBatch)
	var total PruneResult
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := p.Prune(ctx, batch)
		if err != nil {
			return total, fmt.Errorf("registry: prune: %w", err)
		}
		total = total.Add(res)
		if each != nil {
			each(res)
		}
		if res.Retired < batch && res.Deleted < batch {
			return total, nil
		}
	}
}

// TombstoneTTLOrForever returns c.TombstoneTTL, or 0 (keep the tombstone
// forever) when it is zero or negative.
func (c Claim) TombstoneTTLOrForever() time.Duration {
	return max(c.TombstoneTTL, 0)
}

// MaxPruneRuns is the number of prune runs a store keeps: RecordPruneRun
// deletes older ones in the same transaction.
const MaxPruneRuns = 100

// PruneRun is one pruning pass — registry.PruneAll over the whole
// registry — as recorded for operators (the console's status page).
type PruneRun struct {
	// Seq orders the runs: set by RecordPruneRun.
	Seq int64
	// Actor is what ran it: maintenance.Runner's Name ("maintenance on
	// HOST pid N" by default, as "idem serve" runs it), "idem prune" for
	// the command. Required, at most MaxAuditField bytes.
	Actor string
	// StartedAt and FinishedAt bound the pass, by the caller's clock.
	StartedAt, FinishedAt time.Time
	// Result sums what the pass did.
	Result PruneResult
	// Error is why the pass stopped early; "" when it finished. At most
	// MaxAuditDetail bytes are kept.
	Error string
}

// PruneLog records pruning passes. Every Store implements it; its methods
// are safe for concurrent use, across processes too.
type PruneLog interface {
	// RecordPruneRun stores r (its Seq is ignored) and deletes all but
	// the newest MaxPruneRuns runs, in one transaction. A run without an
	// Actor is an error, nothing written; a longer Error is cut.
	RecordPruneRun(ctx context.Context, r PruneRun) error
	// PruneRuns returns up to limit runs, newest (highest Seq) first;
	// limit <= 0 returns none.
	PruneRuns(ctx context.Context, limit int) ([]PruneRun, error)
}

// Check reports whether r can be recorded (its Actor as an audit entry's
// is checked), and returns it with its Error made to fit as an audit
// entry's Detail is (clipText).
func (r PruneRun) Check() (PruneRun, error) {
	if r.Actor == "" {
		return r, errors.New("registry: prune run needs an actor")
	}
	if err := checkText("prune run's actor", r.Actor, MaxAuditField); err != nil {
		return r, err
	}
	r.Error = clipText(r.Error, MaxAuditDetail)
	return r, nil
}

// PruneRecorded runs pass — one pruning pass over s — and records it with
// s.RecordPruneRun under actor, a failed pass too, its Error saying why;
// when ctx ended meanwhile nothing is recorded. It returns the pass's sums
// and its error joined with any error recording it.
func PruneRecorded(ctx context.Context, s PruneLog, actor string, pass func() (PruneResult, error)) (PruneResult, error) {
	run := PruneRun{Actor: actor, StartedAt: time.Now()}
	res, err := pass()
	if ctx.Err() != nil {
		return res, err
	}
	run.FinishedAt, run.Result = time.Now(), res
	if err != nil {
		run.Error = err.Error()
	}
	if rerr := s.RecordPruneRun(ctx, run); rerr != nil {
		return res, errors.Join(err, fmt.Errorf("registry: recording the prune run: %w", rerr))
	}
	return res, err
}

// PruneAllRecorded is PruneRecorded of PruneAll(ctx, s, batch, nil).
func PruneAllRecorded(ctx context.Context, s interface {
	Pruner
	PruneLog
}, batch int, actor string) (PruneResult, error) {
	return PruneRecorded(ctx, s, actor, func() (PruneResult, error) { return PruneAll(ctx, s, batch, nil) })
}
