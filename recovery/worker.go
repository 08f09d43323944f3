// Package recovery is the recovery worker (SPEC E3): it finds operations
// whose lease expired — their owner crashed or hung — and, without ever
// running anything twice, either releases them so the client's retry can
// run, or settles what happened downstream.
//
// For every record Store.ExpiredLeases lists, the worker first reads the
// committed outcome (Get): a terminal record is left alone. Otherwise it
// takes the record over (Store.TakeOver, a compare-and-set on the owner
// generation): many workers may list the same record, only one takeover
// wins and the others skip it, and the crashed owner's late commit is
// fenced. Then:
//
//   - a RESERVED record (no effect outside the database began, nothing
//     committed) is released, so the client's retry reserves it again and
//     runs it;
//   - an EXECUTING record (an effect attempt was stored before a downstream
//     call) is never executed again. The provider is asked by downstream
//     key: if it executed every attempt, the handles are recorded and the
//     record is reconciled to SUCCEEDED (method provider, actor recovery,
//     with the provider's answer as evidence); otherwise — not executed, or
//     no answer — it is marked UNKNOWN and left for a replay with the same
//     key or an operator (idem ops reconcile). A lease that expired is never
//     taken as proof that the effect did not happen: the call may still be
//     in flight.
package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Actor is the Reconciliation.Actor of the worker's reconciliations.
const Actor = "recovery"

// Report counts what RunOnce did.
type Report struct {
	// Released: RESERVED records released for the client's retry.
	Released int `json:"released"`
	// Recovered: records whose outcome had committed meanwhile (left alone).
	Recovered int `json:"recovered"`
	// Unknown: EXECUTING records marked UNKNOWN (provider did not execute
	// the key, or could not be asked).
	Unknown int `json:"unknown"`
	// Reconciled: EXECUTING records reconciled to SUCCEEDED from the
	// provider's answer.
	Reconciled int `json:"reconciled"`
}

// Add returns the sum of r and o.
func (r Report) Add(o Report) Report {
	return Report{Released: r.Released + o.Released, Recovered: r.Recovered + o.Recovered,
		Unknown: r.Unknown + o.Unknown, Reconciled: r.Reconciled + o.Reconciled}
}

func (r Report) total() int { return r.Released + r.Recovered + r.Unknown + r.Reconciled }

// Worker is a recovery worker. Any number may run at once, in any number
// of processes, on one registry.
type Worker struct {
	Store registry.Store
	// Provider answers whether a downstream key was executed; nil means no
	// provider can be asked: every EXECUTING record is marked UNKNOWN.
	Provider Checker
	// Lease is the lease of a takeover; 0 means registry.DefaultLease.
	Lease time.Duration
	// Batch is how many expired records one listing returns; 0 means
	// registry.DefaultRecoverBatch.
	Batch int
	// Logger receives a line per record handled; nil means slog.Default().
	Logger *slog.Logger
}

func (w *Worker) lease() time.Duration {
	if w.Lease <= 0 {
		return registry.DefaultLease
	}
	return w.Lease
}

func (w *Worker) batch() int {
	if w.Batch <= 0 {
		return registry.DefaultRecoverBatch
	}
	return w.Batch
}

func (w *Worker) log() *slog.Logger {
	if w.Logger == nil {
		return slog.Default()
	}
	return w.Logger
}

// RunOnce lists the expired leases in batches and handles every record,
// until a batch lists fewer than Batch records or handles none of them
// (the rest is another worker's, or failing). An error with one record is
// logged and does not stop the others; RunOnce returns the counts and the
// errors joined. A listing error ends it.
func (w *Worker) RunOnce(ctx context.Context) (Report, error) {
	var total Report
	var errs []error
	for {
		if err := ctx.Err(); err != nil {
			return total, errors.Join(append(errs, err)...)
		}
		recs, err := w.Store.ExpiredLeases(ctx, w.batch())
		if err != nil {
			return total, errors.Join(append(errs, fmt.Errorf("recovery: list expired leases: %w", err))...)
		}
		var rep Report
		for _, rec := range recs {
			r, err := w.handle(ctx, rec)
			rep = rep.Add(r)
			if err != nil {
				w.log().Error("recovery failed", "operation_id", rec.OperationID, "err", err)
				errs = append(errs, err)
			}
		}
		total = total.Add(rep)
		if len(recs) < w.batch() || rep.total() == 0 {
			return total, errors.Join(errs...)
		}
	}
}

// DefaultInterval is the interval of Run when it is given none.
const DefaultInterval = 5 * time.Second

// Run calls RunOnce right away and then every interval (DefaultInterval
// when interval <= 0) until ctx ends, logging what each round did and its
// error, carrying on either way.
func (w *Worker) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		rep, err := w.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.log().Error("recovery round failed; retrying at the next interval", "err", err,
				"released", rep.Released, "recovered", rep.Recovered, "unknown", rep.Unknown, "reconciled", rep.Reconciled)
		case rep != (Report{}):
			w.log().Info("recovered", "released", rep.Released, "recovered", rep.Recovered,
				"unknown", rep.Unknown, "reconciled", rep.Reconciled)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// handle recovers one listed record.
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
	case !cur.State.InFlight():
		return Report{}, nil // UNKNOWN: awaits reconciliation
	}
	mine, err := w.Store.TakeOver(ctx, cur, w.lease())
	if errors.Is(err, registry.ErrFenced) {
		return Report{}, nil // another worker won, or the owner finished
	}
	if err != nil {
		return Report{}, fmt.Errorf("recovery: take over %s: %w", cur.OperationID, err)
	}
	effs, err := w.Store.Effects(ctx, mine.OperationID)
	if err != nil {
		return Report{}, fmt.Errorf("recovery: effects of %s: %w", mine.OperationID, err)
	}
	if mine.State == idem.StateReserved && len(effs) == 0 {
		if err := w.Store.Release(ctx, mine); err != nil {
			return Report{}, fmt.Errorf("recovery: release %s: %w", mine.OperationID, err)
		}
		w.log().Info("recovery: released for the retry", "operation_id", mine.OperationID, "owner_gen", mine.OwnerGen)
		return Report{Released: 1}, nil
	}
	return w.settle(ctx, mine, effs)
}

// settle handles a record taken over with effect attempts: never executed
// again; reconciled from the provider's answer, or UNKNOWN.
func (w *Worker) settle(ctx context.Context, mine registry.Record, effs []registry.Effect) (Report, error) {
	handles, why := w.ask(ctx, effs)
	if why == "" {
		for i, e := range effs {
			if err := w.Store.RecordEffect(ctx, mine, e.Name, handles[i], registry.EffectSucceeded); err != nil {
				why = fmt.Sprintf("recording handle %s of %s: %v", handles[i], e.Name, err)
				break
			}
		}
	}
	unk, err := w.Store.MarkUnknown(ctx, mine)
	if err != nil {
		return Report{}, fmt.Errorf("recovery: mark %s unknown: %w", mine.OperationID, err)
	}
	if why != "" {
		w.log().Warn("recovery: outcome unknown, awaiting replay with the same key or an operator",
			"operation_id", unk.OperationID, "reason", why)
		return Report{Unknown: 1}, nil
	}
	body, _ := json.Marshal(struct {
		OperationID string     `json:"operation_id"`
		State       idem.State `json:"state"`
		Reconciled  bool       `json:"reconciled"`
	}{unk.OperationID, idem.StateSucceeded, true})
	ev := make([]string, len(effs))
	for i, e := range effs {
		ev[i] = fmt.Sprintf("provider has transfer %s for key %s", handles[i], e.DownstreamKey)
	}
	_, err = w.Store.Reconcile(ctx, unk.OperationID, registry.Reconciliation{
		Outcome:  idem.StateSucceeded,
		Response: idem.Response{Status: 200, MediaType: "application/json", Body: body},
		Method:   registry.ReconcileProvider,
		Actor:    Actor,
		Evidence: strings.Join(ev, "; "),
	})
	if errors.Is(err, registry.ErrFenced) {
		return Report{Unknown: 1}, nil // an operator reconciled it first
	}
	if err != nil {
		return Report{Unknown: 1}, fmt.Errorf("recovery: reconcile %s (left UNKNOWN): %w", unk.OperationID, err)
	}
	w.log().Info("recovery: reconciled from the provider", "operation_id", unk.OperationID, "evidence", strings.Join(ev, "; "))
	return Report{Reconciled: 1}, nil
}

// ask asks the provider about every attempt. why is "" when every one was
// executed (handles holds their handles), else why the outcome is unknown.
func (w *Worker) ask(ctx context.Context, effs []registry.Effect) (handles []string, why string) {
	if len(effs) == 0 {
		return nil, "no effect attempt stored"
	}
	if w.Provider == nil {
		return nil, "no provider configured"
	}
	handles = make([]string, len(effs))
	for i, e := range effs {
		h, ok, err := w.Provider.Executed(ctx, e.DownstreamKey)
		switch {
		case err != nil:
			return nil, fmt.Sprintf("provider unreachable for key %s: %v", e.DownstreamKey, err)
		case !ok:
			return nil, fmt.Sprintf("provider has not executed key %s (the call may still be in flight)", e.DownstreamKey)
		}
		handles[i] = h
	}
	return handles, ""
}
