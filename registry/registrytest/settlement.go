package registrytest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// testRetentionFromSettlement: a record is kept for its full retention
// after it settles, however long it was in flight or UNKNOWN: Complete,
// ClaimAndExecute and Reconcile set ExpiresAt to the settlement's instant
// plus the retention; an UNKNOWN record ten retentions old is not retired,
// and once reconciled it replays until a retention has passed since, and
// only then retires. threat:late-settlement-lost
func testRetentionFromSettlement(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	cu := e.expiring("conformance.settle", 0)
	u := e.unknown(cu)
	cc := e.expiring("conformance.settle", 0)
	cc.Lease = liveLease
	slow := e.reserve(cc)
	ct := e.expiring("conformance.settle", 0)

	// Ten retentions later: the UNKNOWN record is still there, and the
	// slow owner completes.
	settled := base.Add(10 * retentionPeriod)
	e.setNow(settled)
	e.wantPrune(10, 0, 0)
	done := e.complete(slow, outcome("slow", 0))
	if want := settled.Add(retentionPeriod); !done.ExpiresAt.Equal(want) {
		t.Errorf("Complete ten retentions after the reservation: expires %v, want %v", done.ExpiresAt, want)
	}
	res, err := e.h.ClaimAndExecute(e.ctx, ct, effect("settle", outcome("tx", 0)))
	if err != nil || !res.Record.ExpiresAt.Equal(settled.Add(retentionPeriod)) {
		t.Errorf("ClaimAndExecute: expires %v err %v, want %v", res.Record.ExpiresAt, err, settled.Add(retentionPeriod))
	}
	r := reconciliation("settle")
	rec, err := e.h.Store.Reconcile(e.ctx, u.OperationID, r)
	if err != nil || !rec.ExpiresAt.Equal(settled.Add(retentionPeriod)) {
		t.Fatalf("Reconcile ten retentions after the reservation: expires %v err %v, want %v", rec.ExpiresAt, err, settled.Add(retentionPeriod))
	}

	// Just before a retention since the settlement: everything replays.
	e.setNow(settled.Add(retentionPeriod - time.Microsecond))
	e.wantPrune(10, 0, 0)
	got, created, err := e.h.Store.Reserve(e.ctx, cu)
	if err != nil || created || registry.Decide(got, false, cu.Fingerprint) != registry.Replay || !sameResponse(got.Response, r.Response) {
		t.Errorf("retry of the late-settled operation: created %v err %v verdict %v, want its replay",
			created, err, registry.Decide(got, false, cu.Fingerprint))
	}
	e.checkLive("completed late", done)
	// A retention after the settlement: all three retire.
	e.setNow(settled.Add(retentionPeriod))
	e.wantPrune(10, 3, 0)
}

// testAbandonedReservationsRetire: a reservation nobody finished — RESERVED
// or EXECUTING, no effect attempt recorded — retires into a tombstone
// (state kept) a retention after its lease expired, not a microsecond
// before; after that a retry gets Retired, its old owner cannot complete,
// release or take it over (ErrFenced), and the database refuses to delete
// it. An EXECUTING record with an effect attempt, and an UNKNOWN one, are
// never retired, and neither is one whose lease is live. The database
// refuses a retirement that is early, of an UNKNOWN record, or of one with
// an effect attempt. threat:abandoned-reservation-lockout
func testAbandonedReservationsRetire(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	const lease = 30 * time.Second
	abandon := func(withEffect bool, s idem.State) (registry.Claim, registry.Record) {
		c := e.expiring("conformance.abandoned", 0)
		c.Lease = lease
		rec := e.reserve(c)
		if withEffect {
			e.beginEffect(rec, "transfer")
			rec.State = idem.StateExecuting
		} else if s == idem.StateExecuting {
			if err := e.move(c.Scope, s); err != nil {
				t.Fatalf("move to EXECUTING: %v", err)
			}
			rec.State = s
		}
		if s == idem.StateUnknown {
			u, err := e.h.Store.MarkUnknown(e.ctx, rec)
			if err != nil {
				t.Fatalf("MarkUnknown: %v", err)
			}
			rec = u
		}
		return c, rec
	}
	cr, reserved := abandon(false, idem.StateReserved)
	ce, executing := abandon(false, idem.StateExecuting)
	_, withEffect := abandon(true, idem.StateExecuting)
	_, unknown := abandon(true, idem.StateUnknown)
	cl := e.expiring("conformance.abandoned", 0)
	cl.Lease = liveLease
	live := e.reserve(cl)

	due := base.Add(lease + retentionPeriod)
	e.setNow(due.Add(-time.Microsecond))
	e.wantPrune(10, 0, 0)
	for _, rec := range []registry.Record{reserved, executing, withEffect, unknown} {
		if err := e.h.Exec(e.ctx, `UPDATE idem_operations SET retired_at = lease_until, updated_at = lease_until WHERE scope = $1`,
			rec.Scope[:]); err == nil {
			t.Errorf("the database retired a %s record at its lease's expiry, a retention early", rec.State)
		}
	}
	for _, rec := range []registry.Record{withEffect, unknown} {
		if err := e.h.Exec(e.ctx, `UPDATE idem_operations SET retired_at = updated_at, updated_at = lease_until WHERE scope = $1`,
			rec.Scope[:]); err == nil {
			t.Errorf("the database retired a %s record with an effect attempt", rec.State)
		}
	}
	e.setNow(due)
	e.wantPrune(1, 1, 0) // oldest lease first, batch by batch
	e.wantPrune(10, 1, 0)
	e.setNow(base.AddDate(100, 0, 0))
	e.wantPrune(10, 0, 0) // with an effect, UNKNOWN, live: never
	for _, tc := range []struct {
		c   registry.Claim
		rec registry.Record
	}{{cr, reserved}, {ce, executing}} {
		got, created, err := e.h.Store.Reserve(e.ctx, tc.c)
		switch {
		case err != nil || created:
			t.Fatalf("retry of an abandoned %s: created %v err %v", tc.rec.State, created, err)
		case !got.Retired() || got.State != tc.rec.State || got.OperationID != tc.rec.OperationID || got.Response != nil ||
			!got.RetiredAt.Equal(due) || registry.Decide(got, false, tc.c.Fingerprint) != registry.Retired:
			t.Errorf("abandoned %s: state %s retired at %v, verdict %v; want a %s tombstone retired at %v",
				tc.rec.State, got.State, got.RetiredAt, registry.Decide(got, false, tc.c.Fingerprint), tc.rec.State, due)
		}
		if _, err := e.h.Store.TakeOver(e.ctx, tc.rec, time.Minute); !errors.Is(err, registry.ErrFenced) {
			t.Errorf("TakeOver of an abandoned %s's tombstone: %v, want ErrFenced", tc.rec.State, err)
		}
		if _, err := e.h.Store.Complete(e.ctx, tc.rec, effect("late", outcome("late", 1))); !errors.Is(err, registry.ErrFenced) {
			t.Errorf("Complete of an abandoned %s's tombstone: %v, want ErrFenced", tc.rec.State, err)
		}
		if n := e.effects(tc.rec.OperationID) + e.outbox(tc.rec.OperationID); n != 0 {
			t.Errorf("the fenced Complete left %d business and outbox rows", n)
		}
		if err := e.h.Exec(e.ctx, `DELETE FROM idem_operations WHERE scope = $1`, tc.rec.Scope[:]); err == nil {
			t.Errorf("the database deleted an abandoned %s's tombstone kept forever", tc.rec.State)
		}
	}
	if err := e.h.Store.Release(e.ctx, reserved); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Release of an abandoned reservation's tombstone: %v, want ErrFenced", err)
	}
	for _, rec := range []registry.Record{withEffect, unknown, live} {
		got, err := e.h.Store.Get(e.ctx, rec.Scope)
		if err != nil || got.Retired() || got.State != rec.State {
			t.Errorf("%s record: state %s retired %v err %v, want it kept", rec.State, got.State, got.Retired(), err)
		}
	}
}

// testAbandonedRetireRace: a takeover of an expired reservation and the
// prune that would retire it race; exactly one wins — either the record is
// taken over (a new generation, a new lease) and stays live, or it is
// retired and the takeover is fenced — never both, never a tombstone with
// an owner. threat:abandoned-reservation-lockout
func testAbandonedRetireRace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	const n = 20
	recs := make([]registry.Record, n)
	for i := range recs {
		c := e.expiring("conformance.abandoned-race", 0)
		c.Lease = time.Second
		recs[i] = e.reserve(c)
	}
	e.setNow(base.Add(time.Second + retentionPeriod))
	var (
		mu      sync.Mutex
		retired int
		taken   = make([]bool, n)
	)
	race(n+1, func(i int) {
		if i == n {
			res, err := registry.PruneAll(context.WithoutCancel(e.ctx), e.h.Store, 3, nil)
			if err != nil {
				t.Errorf("PruneAll: %v", err)
			}
			mu.Lock()
			retired = res.Retired
			mu.Unlock()
			return
		}
		_, err := e.h.Store.TakeOver(e.ctx, recs[i], time.Hour)
		switch {
		case err == nil:
			taken[i] = true
		case !errors.Is(err, registry.ErrFenced):
			t.Errorf("TakeOver: %v, want success or ErrFenced", err)
		}
	})
	won := 0
	for i, rec := range recs {
		got, err := e.h.Store.Get(e.ctx, rec.Scope)
		switch {
		case err != nil:
			t.Fatalf("Get: %v", err)
		case taken[i] && (got.Retired() || got.OwnerGen != rec.OwnerGen+1):
			t.Errorf("record %d: taken over, but retired %v gen %d", i, got.Retired(), got.OwnerGen)
		case !taken[i] && (!got.Retired() || got.OwnerGen != rec.OwnerGen):
			t.Errorf("record %d: takeover fenced, but retired %v gen %d", i, got.Retired(), got.OwnerGen)
		}
		if taken[i] {
			won++
		}
	}
	if won+retired != n {
		t.Errorf("%d taken over + %d retired, want %d", won, retired, n)
	}
	t.Logf("%d taken over, %d retired", won, retired)
}

// testMaxActiveExpiredLeases: an in-flight record stops counting toward
// Claim.MaxActive once its lease expires (its owner is gone; a retry may
// take it over), so crashed requests do not lock their principal out; an
// UNKNOWN record keeps counting however old, until settled.
// threat:abandoned-reservation-lockout
func testMaxActiveExpiredLeases(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	owner := e.bytes32()
	claim := func() registry.Claim {
		c := e.claim("conformance.limit-lease")
		c.Owner, c.MaxActive, c.Lease = owner, 2, 30*time.Second
		return c
	}
	e.reserve(claim())
	e.reserve(claim())
	if _, _, err := e.h.Store.Reserve(e.ctx, claim()); !errors.Is(err, registry.ErrActiveLimit) {
		t.Fatalf("third reservation with two live ones: %v, want ErrActiveLimit", err)
	}
	e.setNow(base.Add(30*time.Second - time.Microsecond))
	if _, _, err := e.h.Store.Reserve(e.ctx, claim()); !errors.Is(err, registry.ErrActiveLimit) {
		t.Errorf("a microsecond before the leases expire: %v, want ErrActiveLimit", err)
	}
	at := base.Add(30 * time.Second)
	e.setNow(at)
	u1, u2 := e.reserve(claim()), e.reserve(claim())
	for _, rec := range []registry.Record{u1, u2} {
		e.beginEffect(rec, "transfer")
		if _, err := e.h.Store.MarkUnknown(e.ctx, rec); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
	}
	e.setNow(base.AddDate(1, 0, 0))
	if _, _, err := e.h.Store.Reserve(e.ctx, claim()); !errors.Is(err, registry.ErrActiveLimit) {
		t.Errorf("with two UNKNOWN records a year old: %v, want ErrActiveLimit", err)
	}
	var id string
	_, err := e.h.ClaimAndExecute(e.ctx, claim(), func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		id = rec.OperationID
		return effect("limit", outcome("limit", 0))(ctx, tx, rec)
	})
	if !errors.Is(err, registry.ErrActiveLimit) || id != "" {
		t.Errorf("ClaimAndExecute with two UNKNOWN records: %v (ran %q), want ErrActiveLimit", err, id)
	}
	if _, err := e.h.Store.Reconcile(e.ctx, u1.OperationID, reconciliation("limit")); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	e.reserve(claim())
}
