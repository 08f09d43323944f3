package registrytest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of reconciliation (SPEC E2) and of listing operations (O2).

// reconciliation is a valid SUCCEEDED reconciliation by actor.
func reconciliation(actor string) registry.Reconciliation {
	return registry.Reconciliation{
		Outcome:  idem.StateSucceeded,
		Response: outcome("reconciled-"+actor, 0).Response,
		Method:   registry.ReconcileProvider,
		Actor:    actor,
		Evidence: "GET /transfers/{key} answered 201 tr_1",
	}
}

// testReconcile: Reconcile moves UNKNOWN to the outcome with its response
// (replayed, digest stored) and logs who, when and how; it refuses invalid
// reconciliations, records that are not UNKNOWN (ErrFenced, nothing
// written) and missing records (ErrNotFound).
// Proves threat:settled-on-a-guess (docs/threat-model.md).
func testReconcile(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.reconcile")
	u := e.unknown(c)
	r := reconciliation("recovery-1")
	for name, bad := range map[string]func(*registry.Reconciliation){
		"outcome RESERVED": func(r *registry.Reconciliation) { r.Outcome = idem.StateReserved },
		"outcome REJECTED": func(r *registry.Reconciliation) { r.Outcome = idem.StateRejected },
		"outcome UNKNOWN":  func(r *registry.Reconciliation) { r.Outcome = idem.StateUnknown },
		"no outcome":       func(r *registry.Reconciliation) { r.Outcome = "" },
		"method guess":     func(r *registry.Reconciliation) { r.Method = "guess" },
		"no actor":         func(r *registry.Reconciliation) { r.Actor = "" },
		"no evidence":      func(r *registry.Reconciliation) { r.Evidence = "" },
		"status 0":         func(r *registry.Reconciliation) { r.Response.Status = 0 },
		"status 503":       func(r *registry.Reconciliation) { r.Response.Status = 503 },
	} {
		b := r
		bad(&b)
		if _, err := e.h.Store.Reconcile(e.ctx, u.OperationID, b); err == nil || errors.Is(err, registry.ErrFenced) {
			t.Errorf("Reconcile with %s: %v, want a plain error", name, err)
		}
	}
	if st, _ := e.state(c.Scope); st != idem.StateUnknown {
		t.Fatalf("invalid reconciliations moved the record to %s", st)
	}

	now := base.Add(2 * time.Hour)
	e.setNow(now)
	done, err := e.h.Store.Reconcile(e.ctx, u.OperationID, r)
	if err != nil || done.State != idem.StateSucceeded || !sameResponse(done.Response, r.Response) ||
		done.OwnerGen != u.OwnerGen || !done.UpdatedAt.Equal(now) || done.OperationID != u.OperationID {
		t.Fatalf("Reconcile: %+v, %v; want SUCCEEDED with the response, gen %d, updated at %v", done, err, u.OwnerGen, now)
	}
	got, created, err := e.h.Store.Reserve(e.ctx, c)
	if err != nil || created || registry.Decide(got, false, c.Fingerprint) != registry.Replay || !sameResponse(got.Response, r.Response) {
		t.Errorf("retry after Reconcile: created %v err %v state %s response %+v, want the replay", created, err, got.State, got.Response)
	}
	d := r.Response.Digest()
	if n := e.count(`SELECT count(*) FROM idem_operations WHERE operation_id = $1 AND resp_digest = $2`, u.OperationID, d[:]); n != 1 {
		t.Errorf("the reconciled response's digest is not stored")
	}
	want := registry.ReconciliationEntry{OperationID: u.OperationID, Outcome: idem.StateSucceeded,
		Method: registry.ReconcileProvider, Actor: "recovery-1", Evidence: r.Evidence, CreatedAt: now}
	checkLog(e, u.OperationID, want)

	// Reconciled already: never again, nothing logged.
	if _, err := e.h.Store.Reconcile(e.ctx, u.OperationID, reconciliation("late")); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("second Reconcile: %v, want ErrFenced", err)
	}
	checkLog(e, u.OperationID, want)
	if _, err := e.h.Store.Reconcile(e.ctx, "op_00000000000000000000000000", r); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("Reconcile of a missing operation: %v, want ErrNotFound", err)
	}
	if err := e.h.Exec(e.ctx, `UPDATE idem_reconciliations SET actor = 'someone else'`); err == nil {
		t.Errorf("the database let the reconciliation log be changed")
	}

	// Records that are not UNKNOWN are never reconciled.
	reserved := e.reserve(e.claim("conformance.reconcile"))
	executing := e.reserve(e.claim("conformance.reconcile"))
	e.beginEffect(executing, "transfer")
	finished := e.complete(e.reserve(e.claim("conformance.reconcile")), outcome("finished", 0))
	for _, rec := range []registry.Record{reserved, executing, finished} {
		if _, err := e.h.Store.Reconcile(e.ctx, rec.OperationID, r); !errors.Is(err, registry.ErrFenced) {
			t.Errorf("Reconcile of a %s record: %v, want ErrFenced", rec.State, err)
		}
		if log, err := e.h.Store.Reconciliations(e.ctx, rec.OperationID); err != nil || len(log) != 0 {
			t.Errorf("log of a %s record after a refused Reconcile: %+v, %v", rec.State, log, err)
		}
		if n := e.effects(rec.OperationID); n != 0 && rec.State != idem.StateSucceeded {
			t.Errorf("Reconcile ran something: %d business rows", n)
		}
	}
	if got, err := e.h.Store.GetByID(e.ctx, executing.OperationID); err != nil || got.State != idem.StateExecuting {
		t.Errorf("EXECUTING record after a refused Reconcile: %s, %v", got.State, err)
	}

	// FAILED_FINAL, decided by an operator.
	c2 := e.claim("conformance.reconcile")
	u2 := e.unknown(c2)
	failed := registry.Reconciliation{Outcome: idem.StateFailedFinal, Method: registry.ReconcileOperator,
		Actor: "alice", Evidence: "INC-42: the provider confirms no transfer",
		Response: idem.Response{Status: 422, MediaType: "application/json", Body: []byte(`{"state":"FAILED_FINAL"}`)}}
	if done, err := e.h.Store.Reconcile(e.ctx, u2.OperationID, failed); err != nil || done.State != idem.StateFailedFinal ||
		!sameResponse(done.Response, failed.Response) {
		t.Errorf("Reconcile to FAILED_FINAL: %+v, %v", done, err)
	}
	got, _, err = e.h.Store.Reserve(e.ctx, c2)
	if err != nil || registry.Decide(got, false, c2.Fingerprint) != registry.Replay || !sameResponse(got.Response, failed.Response) {
		t.Errorf("retry after a FAILED_FINAL reconciliation: state %s err %v, want the replay", got.State, err)
	}
	checkLog(e, u2.OperationID, registry.ReconciliationEntry{OperationID: u2.OperationID, Outcome: idem.StateFailedFinal,
		Method: registry.ReconcileOperator, Actor: "alice", Evidence: failed.Evidence, CreatedAt: now})
}

// checkLog checks an operation's reconciliation log is exactly want.
func checkLog(e *env, opID string, want ...registry.ReconciliationEntry) {
	e.t.Helper()
	log, err := e.h.Store.Reconciliations(e.ctx, opID)
	if err != nil {
		e.t.Fatalf("Reconciliations: %v", err)
	}
	if len(log) != len(want) {
		e.t.Fatalf("reconciliation log %+v, want %+v", log, want)
	}
	for i, l := range log {
		w := want[i]
		if l.ID <= 0 || l.OperationID != w.OperationID || l.Outcome != w.Outcome || l.Method != w.Method ||
			l.Actor != w.Actor || l.Evidence != w.Evidence || !l.CreatedAt.Equal(w.CreatedAt) {
			e.t.Errorf("reconciliation %d: %+v, want %+v", i, l, w)
		}
	}
}

// testReconcileRace: of concurrent reconciliations of one UNKNOWN record,
// exactly one succeeds; the others are fenced; the record holds the
// winner's outcome and the log its row only.
// Proves threat:racing-settlements (docs/threat-model.md).
func testReconcileRace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const reconcilers = 5
	for round := range 3 {
		u := e.unknown(e.claim("conformance.reconcile-race"))
		rs := make([]registry.Reconciliation, reconcilers)
		for i := range rs {
			rs[i] = reconciliation(fmt.Sprintf("worker-%d", i))
			if i%2 == 1 {
				rs[i].Outcome, rs[i].Response.Status = idem.StateFailedFinal, 422
			}
		}
		recs := make([]registry.Record, reconcilers)
		errs := make([]error, reconcilers)
		race(reconcilers, func(i int) { recs[i], errs[i] = e.h.Store.Reconcile(e.ctx, u.OperationID, rs[i]) })
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: reconcilers %d and %d both succeeded", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, registry.ErrFenced):
				t.Errorf("round %d: losing Reconcile: %v, want ErrFenced", round, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no reconciler succeeded: %v", round, errs)
		}
		w := rs[winner]
		got, err := e.h.Store.GetByID(e.ctx, u.OperationID)
		if err != nil || got.State != w.Outcome || !sameResponse(got.Response, w.Response) {
			t.Errorf("round %d: record %s %+v (%v), want the winner's %s", round, got.State, got.Response, err, w.Outcome)
		}
		log, err := e.h.Store.Reconciliations(e.ctx, u.OperationID)
		if err != nil || len(log) != 1 || log[0].Actor != w.Actor || log[0].Outcome != w.Outcome {
			t.Errorf("round %d: log %+v (%v), want the winner's row only", round, log, err)
		}
	}
}

// testListOperations: ListOperations filters by state and age (against
// the store's "now"), limits, and orders by creation time, then operation
// ID; the records are those Get returns.
func testListOperations(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	newRec := func(m int, st idem.State) registry.Record {
		e.setNow(at(m))
		c := e.claim("conformance.list")
		switch st {
		case idem.StateReserved:
			return e.reserve(c)
		case idem.StateExecuting:
			rec := e.reserve(c)
			e.beginEffect(rec, "transfer")
			return rec
		case idem.StateUnknown:
			return e.unknown(c)
		}
		return e.complete(e.reserve(c), outcome("list", 0))
	}
	a, b, c := newRec(0, idem.StateReserved), newRec(1, idem.StateUnknown), newRec(2, idem.StateSucceeded)
	d, x := newRec(3, idem.StateUnknown), newRec(4, idem.StateExecuting)
	f, g := newRec(5, idem.StateUnknown), newRec(5, idem.StateUnknown) // same instant: operation ID decides
	if g.OperationID < f.OperationID {
		f, g = g, f
	}
	e.setNow(at(10))
	for _, tc := range []struct {
		name  string
		f     registry.ListFilter
		want  []registry.Record
		count int64 // CountOperations's answer when not len(want) (a limited case)
	}{
		{"all", registry.ListFilter{}, []registry.Record{a, b, c, d, x, f, g}, 0},
		{"unknown", registry.ListFilter{State: idem.StateUnknown}, []registry.Record{b, d, f, g}, 0},
		{"unknown, 8m old", registry.ListFilter{State: idem.StateUnknown, OlderThan: 8 * time.Minute}, []registry.Record{b}, 0},
		{"7m old, inclusive", registry.ListFilter{OlderThan: 7 * time.Minute}, []registry.Record{a, b, c, d}, 0},
		{"limit 2", registry.ListFilter{Limit: 2}, []registry.Record{a, b}, 7},
		{"unknown, limit 3", registry.ListFilter{State: idem.StateUnknown, Limit: 3}, []registry.Record{b, d, f}, 4},
		{"executing", registry.ListFilter{State: idem.StateExecuting}, []registry.Record{x}, 0},
		{"succeeded", registry.ListFilter{State: idem.StateSucceeded}, []registry.Record{c}, 0},
		{"failed", registry.ListFilter{State: idem.StateFailedFinal}, nil, 0},
		{"older than everything", registry.ListFilter{OlderThan: time.Hour}, nil, 0},
	} {
		got, err := e.h.Store.ListOperations(e.ctx, tc.f)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		want := int64(len(tc.want))
		if tc.count != 0 {
			want = tc.count
		}
		tc.f.After = a // ignored by CountOperations, as Limit is
		if n, err := e.h.Store.CountOperations(e.ctx, tc.f); err != nil || n != want {
			t.Errorf("%s: CountOperations %d, %v; want %d", tc.name, n, err, want)
		}
		ids := func(rs []registry.Record) (s []string) {
			for _, r := range rs {
				s = append(s, r.OperationID)
			}
			return s
		}
		if !slices.Equal(ids(got), ids(tc.want)) {
			t.Errorf("%s: listed %v, want %v", tc.name, ids(got), ids(tc.want))
			continue
		}
		for _, r := range got {
			stored, err := e.h.Store.GetByID(e.ctx, r.OperationID)
			if err != nil {
				t.Fatalf("GetByID: %v", err)
			}
			if d := recordDiff(r, stored); len(d) > 0 {
				t.Errorf("%s: listed record %s differs from GetByID: %v", tc.name, r.OperationID, d)
			}
		}
	}
	for _, bad := range []registry.ListFilter{{State: "BOGUS"}, {OlderThan: -time.Second}} {
		if got, err := e.h.Store.ListOperations(e.ctx, bad); err == nil {
			t.Errorf("ListOperations(%+v) = %d records, want an error", bad, len(got))
		}
		if n, err := e.h.Store.CountOperations(e.ctx, bad); err == nil {
			t.Errorf("CountOperations(%+v) = %d, want an error", bad, n)
		}
	}
}
