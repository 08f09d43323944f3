package registrytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

var errBusiness = errors.New("registrytest: business function failed")

// testWinnerRollbackFreesScope: a claim whose business function fails, or
// a released reservation, leaves no record, so a retry executes anew.
func testWinnerRollbackFreesScope(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.rollback")
	res, err := e.h.ClaimAndExecute(e.ctx, c, failing(errBusiness))
	if !errors.Is(err, errBusiness) {
		t.Errorf("ClaimAndExecute with a failing business function: %v, want the function's error", err)
	}
	if res.Verdict != 0 {
		t.Errorf("failed claim returned verdict %v, want none", res.Verdict)
	}
	if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("Get after the rolled-back claim: %v, want ErrNotFound", err)
	}
	if n := e.count(countAllEffects); n != 0 {
		t.Errorf("%d business rows after rollback, want 0", n)
	}
	res, err = e.h.ClaimAndExecute(e.ctx, c, effect("retry", outcome("rollback", 1)))
	if err != nil || res.Verdict != registry.Execute {
		t.Fatalf("retry after rollback: verdict %v err %v, want execute", res.Verdict, err)
	}
	if n := e.effects(res.Record.OperationID); n != 1 {
		t.Errorf("%d business rows after the retry, want 1", n)
	}

	c = e.claim("conformance.release")
	rec := e.reserve(c)
	if err := e.h.Store.Release(e.ctx, rec); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("Get after Release: %v, want ErrNotFound", err)
	}
	if _, err := e.h.Store.GetByID(e.ctx, rec.OperationID); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("GetByID after Release: %v, want ErrNotFound", err)
	}
	if err := e.h.Store.Release(e.ctx, rec); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("second Release: %v, want ErrFenced", err)
	}
	again := e.reserve(c)
	if again.OperationID == rec.OperationID {
		t.Errorf("reservation after Release reused operation ID %s", rec.OperationID)
	}
	if again.State != idem.StateReserved || again.OwnerGen != 1 {
		t.Errorf("reservation after Release: state %s gen %d, want RESERVED gen 1", again.State, again.OwnerGen)
	}
	// The released reservation had the same scope and generation as the new
	// one; its operation ID must still fence it off the new reservation.
	if err := e.h.Store.Release(e.ctx, rec); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Release of the old reservation after a new one: %v, want ErrFenced", err)
	}
	e.h.SetNow(time.Now().Add(24 * time.Hour))
	if _, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("TakeOver of the old reservation after a new one: %v, want ErrFenced", err)
	}
	e.h.SetNow(time.Time{})
	if _, err := e.h.Store.Complete(e.ctx, rec, effect("stale", outcome("stale", 0))); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Complete of the old reservation after a new one: %v, want ErrFenced", err)
	}
	if got, err := e.h.Store.Get(e.ctx, c.Scope); err != nil || got.OperationID != again.OperationID || got.State != idem.StateReserved {
		t.Errorf("new reservation after stale calls: %+v, %v", got, err)
	}
	if n := e.effects(rec.OperationID); n != 0 {
		t.Errorf("%d business rows from the stale Complete, want 0", n)
	}
}

// testStaleOwnerCannotCommit: after a takeover, the old owner's Complete
// and Release are fenced and leave nothing behind.
// Proves threat:crashed-owner-rerun (docs/threat-model.md).
func testStaleOwnerCannotCommit(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.fence")
	c.Lease = time.Minute
	old := e.reserve(c)
	if !old.LeaseUntil.Equal(base.Add(time.Minute)) {
		t.Errorf("LeaseUntil %v, want %v", old.LeaseUntil, base.Add(time.Minute))
	}
	e.setNow(old.LeaseUntil.Add(-time.Millisecond))
	if _, err := e.h.Store.TakeOver(e.ctx, old, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("TakeOver before the lease expired: %v, want ErrFenced", err)
	}
	e.setNow(old.LeaseUntil) // the lease ends at lease_until inclusive
	cur, err := e.h.Store.TakeOver(e.ctx, old, 2*time.Minute)
	if err != nil {
		t.Fatalf("TakeOver at lease expiry: %v", err)
	}
	if cur.OwnerGen != 2 || cur.State != idem.StateReserved || cur.OperationID != old.OperationID ||
		!cur.LeaseUntil.Equal(old.LeaseUntil.Add(2*time.Minute)) {
		t.Errorf("taken over: gen %d state %s id %s lease %v; want gen 2, RESERVED, %s, %v",
			cur.OwnerGen, cur.State, cur.OperationID, cur.LeaseUntil, old.OperationID, old.LeaseUntil.Add(2*time.Minute))
	}
	if _, err := e.h.Store.TakeOver(e.ctx, old, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("TakeOver with the stale generation: %v, want ErrFenced", err)
	}
	out := outcome("fence", 1)
	if _, err := e.h.Store.Complete(e.ctx, old, effect("stale", out)); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Complete by the stale owner: %v, want ErrFenced", err)
	}
	if n := e.effects(old.OperationID); n != 0 {
		t.Errorf("the stale owner's business row survived: %d rows", n)
	}
	if n := e.outbox(old.OperationID); n != 0 {
		t.Errorf("the stale owner's outbox rows survived: %d rows", n)
	}
	if err := e.h.Store.Release(e.ctx, old); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Release by the stale owner: %v, want ErrFenced", err)
	}
	if got, err := e.h.Store.Get(e.ctx, c.Scope); err != nil || got.OwnerGen != 2 || got.State != idem.StateReserved {
		t.Errorf("after the stale owner's attempts: gen %d state %s err %v, want gen 2 RESERVED", got.OwnerGen, got.State, err)
	}
	done := e.complete(cur, out)
	if done.State != idem.StateSucceeded || done.OwnerGen != 2 || !sameResponse(done.Response, out.Response) {
		t.Errorf("completed: state %s gen %d response %+v", done.State, done.OwnerGen, done.Response)
	}
	if n := e.effects(old.OperationID); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
	// A terminal record is not completed, released or taken over again.
	if _, err := e.h.Store.Complete(e.ctx, cur, effect("twice", out)); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("second Complete of a terminal record: %v, want ErrFenced", err)
	}
	if err := e.h.Store.Release(e.ctx, done); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Release of a terminal record: %v, want ErrFenced", err)
	}
	e.setNow(base.Add(time.Hour))
	if _, err := e.h.Store.TakeOver(e.ctx, done, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("TakeOver of a terminal record: %v, want ErrFenced", err)
	}
	if n := e.effects(old.OperationID); n != 1 {
		t.Errorf("%d business rows after the refused second attempts, want 1", n)
	}
	checkOutboxRows(e, old.OperationID, 1)

	// UNKNOWN awaits reconciliation: never taken over, never completed.
	c = e.claim("conformance.unknown")
	c.Lease = time.Minute
	rec := e.reserve(c)
	inTxVerdict(e, c, registry.InProgress)
	e.exec(moveInFlight, string(idem.StateExecuting), c.Scope[:])
	inTxVerdict(e, c, registry.InProgress)
	e.exec(moveInFlight, string(idem.StateUnknown), c.Scope[:])
	inTxVerdict(e, c, registry.Unknown)
	if got, created, err := e.h.Store.Reserve(e.ctx, c); err != nil || created || registry.Decide(got, false, c.Fingerprint) != registry.Unknown {
		t.Errorf("Reserve of an UNKNOWN scope: state %s created %v err %v, want the UNKNOWN record", got.State, created, err)
	}
	rec.State = idem.StateUnknown
	e.setNow(base.Add(24 * time.Hour))
	if _, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("TakeOver of an UNKNOWN record: %v, want ErrFenced", err)
	}
	if _, err := e.h.Store.Complete(e.ctx, rec, effect("unknown", out)); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Complete of an UNKNOWN record: %v, want ErrFenced", err)
	}
	if n := e.effects(rec.OperationID); n != 0 {
		t.Errorf("Complete of an UNKNOWN record left %d business rows", n)
	}
}

// testLeaseExpiryRecovery: an owner that crashed after reserving is
// recovered by exactly one recoverer, which completes once; the late
// original owner is fenced.
// Proves threat:crashed-owner-rerun (docs/threat-model.md).
func testLeaseExpiryRecovery(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.recovery")
	c.Lease = 30 * time.Second
	crashed := e.reserve(c)

	now := base.Add(time.Minute)
	e.setNow(now)
	seen, err := e.h.Store.Get(e.ctx, c.Scope)
	if err != nil || !seen.State.InFlight() || e.effects(seen.OperationID) != 0 {
		t.Fatalf("recoverer reads state %s err %v: want an in-flight record with nothing committed", seen.State, err)
	}
	mine, err := e.h.Store.TakeOver(e.ctx, seen, 30*time.Second)
	if err != nil || mine.OwnerGen != 2 {
		t.Fatalf("TakeOver: gen %d err %v, want gen 2", mine.OwnerGen, err)
	}
	e.complete(mine, outcome("recovery", 0))
	if _, err := e.h.Store.Complete(e.ctx, crashed, effect("late", outcome("late", 0))); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("late Complete by the crashed owner: %v, want ErrFenced", err)
	}
	if n := e.effects(crashed.OperationID); n != 1 {
		t.Errorf("%d business rows, want exactly 1", n)
	}

	// Recoverers race for the same expired record: one wins each round.
	const recoverers = 8
	c = e.claim("conformance.recovery-race")
	c.Lease = 30 * time.Second
	rec := e.reserve(c)
	for round := range 3 {
		now = now.Add(time.Hour)
		e.setNow(now)
		wins := make([]registry.Record, recoverers)
		errs := make([]error, recoverers)
		race(recoverers, func(i int) {
			wins[i], errs[i] = e.h.Store.TakeOver(e.ctx, rec, 30*time.Second)
		})
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: recoverers %d and %d both took over generation %d", round, winner, i, rec.OwnerGen)
			case err == nil:
				winner = i
			case !errors.Is(err, registry.ErrFenced):
				t.Errorf("round %d: losing TakeOver: %v, want ErrFenced", round, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no recoverer took over generation %d", round, rec.OwnerGen)
		}
		if got := wins[winner].OwnerGen; got != rec.OwnerGen+1 {
			t.Fatalf("round %d: generation %d after takeover of %d", round, got, rec.OwnerGen)
		}
		rec = wins[winner]
	}
}

// inTxVerdict checks an in-transaction claim on c's existing record gets
// want, without error and without running the business function.
func inTxVerdict(e *env, c registry.Claim, want registry.Verdict) {
	e.t.Helper()
	ran := false
	res, err := e.h.ClaimAndExecute(e.ctx, c, func(ctx context.Context, tx registry.Tx, r registry.Record) (registry.Outcome, error) {
		ran = true
		return effect("in-tx", outcome("in-tx", 0))(ctx, tx, r)
	})
	if err != nil || res.Verdict != want || ran {
		e.t.Errorf("in-transaction claim on an existing record: verdict %v err %v (business function ran: %v), want %v",
			res.Verdict, err, ran, want)
	}
}
