// Package recovery is the recovery worker (SPEC E3, E2): it settles, on
// evidence only and without any client retry, the operations whose effect
// outside the database has no known outcome, and never runs anything
// twice.
//
// Every round it does two things:
//
//   - Expired leases. For every EXECUTING record Store.ExpiredLeases lists
//     (its owner began an effect and crashed or hung), it first reads the
//     committed outcome (Get): a terminal record is left alone. Otherwise
//     it takes the record over (Store.TakeOver, a compare-and-set on the
//     owner generation: many workers may list the same record, only one
//     takeover wins, and the crashed owner's late writes are fenced) and
//     marks it UNKNOWN. A lease that expired is never taken as proof that
//     the effect did not happen: the call may still be in flight.
//     Expired RESERVED records are not the worker's: nothing outside the
//     database began, and the client's retry continues the same operation
//     (idemhttp takes it over); one that nobody continues is retired into
//     a tombstone by Prune a retention after its lease expired
//     (registry/retention.go).
//   - UNKNOWN operations. Each is settled with effect.Operation.Settle —
//     a lookup by the downstream key, then a re-send of the stored
//     request with the same key — and its outcome rendered and stored with
//     Store.Reconcile (actor "recovery"). An operation whose downstream
//     cannot answer yet stays UNKNOWN and is tried again with exponential
//     backoff; one whose operation the worker has no effects for
//     (Worker.Effects) waits for an operator (idem ops reconcile).
package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// Actor is the Reconciliation.Actor of the worker's reconciliations.
const Actor = "recovery"

// Defaults for Worker fields left at zero.
const (
	// DefaultInterval is the interval of Run when it is given none.
	DefaultInterval = 5 * time.Second
	// DefaultBackoff is the first wait before an UNKNOWN operation that
	// could not be settled is tried again; each failure doubles it.
	DefaultBackoff = time.Second
	// DefaultMaxBackoff caps that wait.
	DefaultMaxBackoff = time.Minute
	// DefaultUnknownBatch is how many UNKNOWN operations one listing reads.
	DefaultUnknownBatch = 1000
)

// Report counts what RunOnce did.
type Report struct {
	// Recovered: expired records whose outcome had committed meanwhile
	// (left alone).
	Recovered int `json:"recovered"`
	// Unknown: EXECUTING records with an expired lease taken over and
	// marked UNKNOWN.
	Unknown int `json:"unknown"`
	// Reconciled: UNKNOWN operations settled on evidence.
	Reconciled int `json:"reconciled"`
	// Unsettled: UNKNOWN operations tried whose downstream gave no
	// evidence yet (or that no effects are configured for).
	Unsettled int `json:"unsettled"`
}

// Add returns the sum of r and o.
func (r Report) Add(o Report) Report {
	return Report{Recovered: r.Recovered + o.Recovered, Unknown: r.Unknown + o.Unknown,
		Reconciled: r.Reconciled + o.Reconciled, Unsettled: r.Unsettled + o.Unsettled}
}

func (r Report) total() int { return r.Recovered + r.Unknown + r.Reconciled + r.Unsettled }

// Worker is a recovery worker. Any number may run at once, in any number
// of processes, on one registry. A numeric field that is zero or negative
// means its default. Its fields must not change once it runs; its methods
// are safe for concurrent use.
type Worker struct {
	Store registry.Store
	// Effects holds the effects of every operation the worker may settle,
	// by operation name. An UNKNOWN operation of another name stays
	// UNKNOWN for an operator. nil: the worker settles nothing, it only
	// takes expired EXECUTING records over and marks them UNKNOWN.
	Effects effect.Set
	// Lease is the lease of a takeover; 0 means registry.DefaultLease.
	Lease time.Duration
	// Batch is how many expired records one listing returns; 0 means
	// registry.DefaultRecoverBatch.
	Batch int
	// UnknownBatch is how many UNKNOWN operations, oldest first, one read
	// of a round lists (a round reads them all, page by page); 0 means
	// DefaultUnknownBatch.
	UnknownBatch int
	// Backoff and MaxBackoff shape the retries of an UNKNOWN operation
	// that could not be settled: Backoff after the first failure, doubling
	// up to MaxBackoff. 0 means DefaultBackoff and DefaultMaxBackoff. The
	// schedule is this worker's own (in memory).
	Backoff, MaxBackoff time.Duration
	// Metrics, if set, records settlements (NewMetrics).
	Metrics *Metrics
	// Logger receives a line per record handled; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider traces each record handled (trace.go); nil means
	// otel.GetTracerProvider(), which traces nothing until the
	// application sets one.
	TracerProvider trace.TracerProvider

	mu    sync.Mutex
	retry map[string]backoff // UNKNOWN operation ID → when to try again
}

// backoff is the retry schedule of one unsettled UNKNOWN operation.
type backoff struct {
	next time.Time
	wait time.Duration
}

func (w *Worker) lease() time.Duration     { return registry.LeaseOrDefault(w.Lease) }
func (w *Worker) batch() int               { return cmp.Or(max(w.Batch, 0), registry.DefaultRecoverBatch) }
func (w *Worker) unknownBatch() int        { return cmp.Or(max(w.UnknownBatch, 0), DefaultUnknownBatch) }
func (w *Worker) firstWait() time.Duration { return cmp.Or(max(w.Backoff, 0), DefaultBackoff) }
func (w *Worker) maxWait() time.Duration   { return cmp.Or(max(w.MaxBackoff, 0), DefaultMaxBackoff) }

func (w *Worker) log() *slog.Logger { return cmp.Or(w.Logger, slog.Default()) }

// RunOnce handles the expired EXECUTING records in batches, until a batch
// lists fewer than Batch records or handles none of them (the rest is
// another worker's, or failing), then tries to settle the UNKNOWN
// operations that are due. An error with one record is logged and does
// not stop the others; RunOnce returns the counts and the errors joined.
// A listing error ends that part of the round.
func (w *Worker) RunOnce(ctx context.Context) (Report, error) {
	total, errs := w.expired(ctx)
	rep, err := w.unknown(ctx)
	return total.Add(rep), errors.Join(append(errs, err)...)
}

// expired handles the expired EXECUTING records.
func (w *Worker) expired(ctx context.Context) (Report, []error) {
	var total Report
	var errs []error
	for {
		if err := ctx.Err(); err != nil {
			return total, append(errs, err)
		}
		recs, err := w.Store.ExpiredLeases(ctx, w.batch())
		if err != nil {
			return total, append(errs, fmt.Errorf("recovery: list expired leases: %w", err))
		}
		var rep Report
		for _, rec := range recs {
			r, err := w.handleTraced(ctx, rec) // trace.go
			rep = rep.Add(r)
			if err != nil {
				w.log().Error("recovery failed", "operation_id", rec.OperationID, "err", err)
				errs = append(errs, err)
			}
		}
		total = total.Add(rep)
		if len(recs) < w.batch() || rep.total() == 0 {
			return total, errs
		}
	}
}

// Run calls RunOnce right away and then every interval (DefaultInterval
// when interval <= 0) until ctx ends, logging what each round did and its
// error, carrying on either way.
func (w *Worker) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(cmp.Or(max(interval, 0), DefaultInterval))
	defer tick.Stop()
	for {
		rep, err := w.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.log().Error("recovery round failed; retrying at the next interval", "err", err,
				"recovered", rep.Recovered, "unknown", rep.Unknown, "reconciled", rep.Reconciled, "unsettled", rep.Unsettled)
		case rep.Recovered+rep.Unknown+rep.Reconciled > 0:
			w.log().Info("recovered", "recovered", rep.Recovered, "unknown", rep.Unknown,
				"reconciled", rep.Reconciled, "unsettled", rep.Unsettled)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// handle recovers one listed EXECUTING record: left alone if it finished,
// else taken over and marked UNKNOWN (settled by unknown, in this round).
func (w *Worker) handle(ctx context.Context, listed registry.Record) (Report, error) {
	cur, err := w.Store.Get(ctx, listed.Scope)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return Report{}, nil // released meanwhile
	case err != nil:
		return Report{}, fmt.Errorf("recovery: read %s: %w", listed.OperationID, err)
	case cur.OperationID != listed.OperationID || cur.OwnerGen != listed.OwnerGen:
		return Report{}, nil // another owner or worker has it
	case cur.State.Terminal():
		w.log().Info("recovery: outcome committed, nothing to do", "operation_id", cur.OperationID, "state", cur.State)
		return Report{Recovered: 1}, nil
	case cur.State != idem.StateExecuting:
		return Report{}, nil // UNKNOWN: settled below; RESERVED: the retry's
	}
	mine, err := w.Store.TakeOver(ctx, cur, w.lease())
	if errors.Is(err, registry.ErrFenced) {
		return Report{}, nil // another worker won, or the owner finished
	}
	if errors.Is(err, registry.ErrTenantMoved) {
		// The tenant moved to another registry (registry.TenantFencer):
		// its copy there is recovered there; this one stays as it is.
		w.log().Info("recovery: the operation's tenant moved to another registry; left to it", "operation_id", cur.OperationID)
		return Report{}, nil
	}
	if err != nil {
		return Report{}, fmt.Errorf("recovery: take over %s: %w", cur.OperationID, err)
	}
	if _, err := w.Store.MarkUnknown(ctx, mine); err != nil {
		return Report{}, fmt.Errorf("recovery: mark %s unknown: %w", mine.OperationID, err)
	}
	w.log().Warn("recovery: lease expired after an effect began; outcome unknown until settled on evidence",
		"operation_id", mine.OperationID, "owner_gen", mine.OwnerGen)
	return Report{Unknown: 1}, nil
}

// unknown tries to settle the UNKNOWN operations that are due, reading
// them page by page (UnknownBatch a page), oldest first, so operations
// that cannot be settled never hide newer ones.
func (w *Worker) unknown(ctx context.Context) (Report, error) {
	var all []registry.Record
	f := registry.ListFilter{State: idem.StateUnknown, Limit: w.unknownBatch()}
	for {
		page, err := w.Store.ListOperations(ctx, f)
		if err != nil {
			return Report{}, fmt.Errorf("recovery: list unknown operations: %w", err)
		}
		all = append(all, page...)
		if len(page) < f.Limit {
			break
		}
		f.After = page[len(page)-1]
	}
	now := time.Now()
	w.forget(ctx, all)
	var rep Report
	var errs []error
	for _, rec := range all {
		if ctx.Err() != nil {
			return rep, errors.Join(append(errs, ctx.Err())...)
		}
		if !w.due(rec.OperationID, now) {
			continue
		}
		ops := w.Effects[rec.Operation]
		if ops == nil {
			rep.Unsettled++
			w.failed(ctx, rec.OperationID, now, "no effects are configured for operation "+rec.Operation+": an operator settles it")
			continue
		}
		sctx, span := w.start(ctx, SpanSettle, rec) // trace.go
		s, err := ops.Settle(sctx, w.Store, rec, Actor)
		endSettle(span, s, err)
		switch {
		case errors.Is(err, registry.ErrTenantMoved):
			// Settled on the tenant's new registry, not here: not an
			// error of this round; tried again after its backoff.
			rep.Unsettled++
			w.failed(ctx, rec.OperationID, now, "the operation's tenant moved to another registry")
		case err != nil:
			errs = append(errs, err)
			rep.Unsettled++
			w.failed(ctx, rec.OperationID, now, err.Error())
		case s.Settled:
			w.settled(sctx, rec, s)
			if s.Method != "" {
				rep.Reconciled++
			}
		default:
			rep.Unsettled++
			w.failed(ctx, rec.OperationID, now, s.Reason)
		}
	}
	return rep, errors.Join(errs...)
}

// due reports whether the operation's backoff allows a try at now.
func (w *Worker) due(id string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, ok := w.retry[id]
	return !ok || !now.Before(b.next)
}

// failed schedules the next try of an operation that was not settled,
// and records why and when (registry.RecordRecoveryAttempt) for the
// console: display only, a failure to record is logged and changes
// nothing else.
func (w *Worker) failed(ctx context.Context, id string, now time.Time, why string) {
	w.mu.Lock()
	if w.retry == nil {
		w.retry = map[string]backoff{}
	}
	b := w.retry[id]
	b.wait = min(max(b.wait*2, w.firstWait()), w.maxWait())
	b.next = now.Add(b.wait)
	w.retry[id] = b
	w.mu.Unlock()
	w.log().Info("recovery: unknown operation not settled; trying again later", "operation_id", id, "reason", why, "retry_in", b.wait)
	if _, err := registry.RecordRecoveryAttempt(ctx, w.Store, id, why, now, b.next); err != nil {
		w.log().Warn("recovery: the attempt could not be recorded for the console", "operation_id", id, "err", err)
	}
}

// settled logs and measures a settlement and forgets its backoff and
// its recorded attempts.
func (w *Worker) settled(ctx context.Context, rec registry.Record, s effect.Settlement) {
	w.mu.Lock()
	delete(w.retry, rec.OperationID)
	w.mu.Unlock()
	w.forgetAttempts(ctx, rec.OperationID)
	if s.Method == "" {
		return // another worker, a retry or an operator settled it
	}
	w.Metrics.observe(ctx, rec, s)
	w.log().Info("recovery: unknown operation settled on evidence", "operation_id", rec.OperationID,
		"state", s.Record.State, "method", s.Method)
}

// forget drops the backoff and the recorded attempts of operations that
// are no longer UNKNOWN (an operator or a client's retry settled them),
// so neither grows without bound.
func (w *Worker) forget(ctx context.Context, listed []registry.Record) {
	w.mu.Lock()
	if len(w.retry) <= len(listed) {
		w.mu.Unlock()
		return
	}
	keep := make(map[string]bool, len(listed))
	for _, r := range listed {
		keep[r.OperationID] = true
	}
	var gone []string
	for id := range w.retry {
		if !keep[id] {
			delete(w.retry, id)
			gone = append(gone, id)
		}
	}
	w.mu.Unlock()
	for _, id := range gone {
		w.forgetAttempts(ctx, id)
	}
}

// forgetAttempts deletes the recorded attempts of an operation that is
// no longer UNKNOWN; a failure is logged (the row only lingers).
func (w *Worker) forgetAttempts(ctx context.Context, id string) {
	if err := registry.ForgetRecoveryAttempts(ctx, w.Store, id); err != nil {
		w.log().Warn("recovery: recorded attempts not deleted", "operation_id", id, "err", err)
	}
}
