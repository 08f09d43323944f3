package registrytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of retention (SPEC E5): Prune retires expired terminal records into
// tombstones, deletes the tombstones of operations that declared a
// TombstoneTTL after it, and the database refuses every other way of
// forgetting an operation.

// retentionPeriod is the Retention of the claims of these cases.
const retentionPeriod = time.Hour

// liveLease is a lease that outlasts every case: the record of an owner
// that keeps heartbeating, never abandoned.
const liveLease = 200 * 365 * 24 * time.Hour

const (
	// countTombstone counts the record at $1 if it is a tombstone whose
	// whole response is gone.
	countTombstone = `SELECT count(*) FROM idem_operations WHERE scope = $1 AND retired_at IS NOT NULL
		AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
		AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL`
	countEffectRows          = `SELECT count(*) FROM idem_effects WHERE operation_id = $1`
	countReconciliationRows  = `SELECT count(*) FROM idem_reconciliations WHERE operation_id = $1`
	countRecoveryAttemptRows = `SELECT count(*) FROM idem_recovery_attempts WHERE operation_id = $1`
)

// expiring returns a claim on a new scope kept for retentionPeriod, whose
// tombstone lives ttl (0: forever).
func (e *env) expiring(operation string, ttl time.Duration) registry.Claim {
	c := e.claim(operation)
	c.Retention = retentionPeriod
	c.TombstoneTTL = ttl
	return c
}

// pruneOnce calls Prune and fails the test on error.
func (e *env) pruneOnce(limit int) registry.PruneResult {
	e.t.Helper()
	res, err := e.h.Store.Prune(e.ctx, limit)
	if err != nil {
		e.t.Fatalf("Prune(%d): %v", limit, err)
	}
	return res
}

// wantPrune prunes once with limit and checks the counts.
func (e *env) wantPrune(limit, retired, deleted int) {
	e.t.Helper()
	if got := e.pruneOnce(limit); got != (registry.PruneResult{Retired: retired, Deleted: deleted}) {
		e.t.Errorf("Prune(%d) = %+v, want %d retired, %d deleted", limit, got, retired, deleted)
	}
}

// checkTombstone checks that the record at was's scope is was retired at
// the given time: the response gone (in the database too), everything else
// kept, the deletion time set from the TTL.
func (e *env) checkTombstone(what string, was registry.Record, at time.Time) registry.Record {
	e.t.Helper()
	got, err := e.h.Store.Get(e.ctx, was.Scope)
	if err != nil {
		e.t.Fatalf("%s: Get of a tombstone: %v", what, err)
	}
	byID, err := e.h.Store.GetByID(e.ctx, was.OperationID)
	if err != nil || !byID.Retired() || byID.Scope != was.Scope {
		e.t.Errorf("%s: GetByID of a tombstone: retired %v err %v", what, byID.Retired(), err)
	}
	wantUntil := time.Time{}
	if was.TombstoneTTL > 0 {
		wantUntil = at.Add(was.TombstoneTTL)
	}
	switch {
	case !got.Retired() || !got.RetiredAt.Equal(at) || got.Response != nil:
		e.t.Errorf("%s: retired %v at %v, response %+v; want retired at %v without response",
			what, got.Retired(), got.RetiredAt, got.Response, at)
	case !got.TombstoneUntil.Equal(wantUntil) || got.TombstoneTTL != was.TombstoneTTL:
		e.t.Errorf("%s: tombstone until %v (TTL %v), want %v (TTL %v)", what, got.TombstoneUntil, got.TombstoneTTL, wantUntil, was.TombstoneTTL)
	case got.State != was.State || got.OperationID != was.OperationID || got.Fingerprint != was.Fingerprint ||
		got.Operation != was.Operation || got.Owner != was.Owner || got.OwnerGen != was.OwnerGen ||
		!got.CreatedAt.Equal(was.CreatedAt) || !got.ExpiresAt.Equal(was.ExpiresAt) || !got.UpdatedAt.Equal(at):
		e.t.Errorf("%s: tombstone %+v does not keep the record %+v", what, got, was)
	}
	if e.count(countTombstone, was.Scope[:]) != 1 {
		e.t.Errorf("%s: the stored tombstone still holds part of its response", what)
	}
	return got
}

// checkLive checks that the record at was's scope is not retired and still
// has its response.
func (e *env) checkLive(what string, was registry.Record) {
	e.t.Helper()
	got, err := e.h.Store.Get(e.ctx, was.Scope)
	switch {
	case err != nil:
		e.t.Errorf("%s: Get: %v", what, err)
	case got.Retired() || !got.TombstoneUntil.IsZero() || got.State != was.State || got.OperationID != was.OperationID:
		e.t.Errorf("%s: %s retired %v, want %s %s not retired", what, got.State, got.Retired(), was.State, was.OperationID)
	case was.Response != nil && !sameResponse(got.Response, *was.Response):
		e.t.Errorf("%s: response %+v, want %+v", what, got.Response, was.Response)
	}
}

// finalOutcome is outcome with another terminal state.
func finalOutcome(tag string, state idem.State) registry.Outcome {
	o := outcome(tag, 0)
	o.State, o.Response.Status = state, 422
	return o
}

// testPruneRetiresExpired: Prune retires expired SUCCEEDED, FAILED_FINAL and
// REJECTED records, oldest expiry first, batch by batch, dropping the
// response and keeping the rest (outbox and business rows too); unexpired
// records, UNKNOWN ones and RESERVED and EXECUTING ones whose lease is
// live are never retired, however old (abandoned ones:
// AbandonedReservationsRetire); tombstones without TTL are never deleted.
func testPruneRetiresExpired(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	ok := e.complete(e.reserve(e.expiring("conformance.prune", 0)), outcome("prune", 2))
	e.setNow(base.Add(time.Minute))
	final := e.complete(e.reserve(e.expiring("conformance.prune", 0)), finalOutcome("final", idem.StateFailedFinal))
	e.setNow(base.Add(2 * time.Minute))
	rejected := e.complete(e.reserve(e.expiring("conformance.prune", 0)), finalOutcome("rejected", idem.StateRejected))
	later := e.expiring("conformance.prune", 0)
	later.Retention = 3 * time.Hour
	live := e.complete(e.reserve(later), outcome("later", 0))
	var inFlight []registry.Record
	for _, s := range []idem.State{idem.StateReserved, idem.StateExecuting, idem.StateUnknown} {
		c := e.expiring("conformance.prune", time.Minute)
		c.Lease = liveLease // an owner that heartbeats: never abandoned
		rec := e.reserve(c)
		for _, step := range pathTo(s) {
			if err := e.move(c.Scope, step); err != nil {
				t.Fatalf("moving a record to %s: %v", step, err)
			}
		}
		rec.State = s
		inFlight = append(inFlight, rec)
	}

	e.setNow(base.Add(retentionPeriod - time.Microsecond))
	e.wantPrune(10, 0, 0)
	e.checkLive("before its expiry", ok)
	e.setNow(base.Add(retentionPeriod)) // ok's expiry: due, the others not yet
	e.wantPrune(10, 1, 0)
	e.checkTombstone("SUCCEEDED at its expiry", ok, base.Add(retentionPeriod))
	e.checkLive("FAILED_FINAL before its expiry", final)
	at := base.Add(2 * retentionPeriod)
	e.setNow(at)
	e.wantPrune(1, 1, 0) // oldest expiry first: final before rejected
	e.checkTombstone("FAILED_FINAL", final, at)
	e.checkLive("REJECTED beyond the batch", rejected)
	e.wantPrune(5, 1, 0)
	e.checkTombstone("REJECTED", rejected, at)
	e.wantPrune(5, 0, 0)
	e.checkLive("unexpired", live)
	if n, m := e.effects(ok.OperationID), e.outbox(ok.OperationID); n != 1 || m != 2 {
		t.Errorf("retirement changed the business rows (%d) or outbox rows (%d), want 1 and 2", n, m)
	}

	e.setNow(base.AddDate(100, 0, 0))
	e.wantPrune(100, 1, 0) // live, at last; nothing is deleted, no TTL
	e.wantPrune(100, 0, 0)
	for _, rec := range inFlight {
		e.checkLive(string(rec.State)+" past its expiry", rec)
	}
	e.checkTombstone("SUCCEEDED after a century", ok, base.Add(retentionPeriod))
	if n := e.count(countRecords); n != 7 {
		t.Errorf("%d records after pruning, want all 7", n)
	}
}

// testRetiredScopeRefused: a retry on a tombstone gets the tombstone, never
// a new record, from Reserve and from ClaimAndExecute: Decide says Retired
// for the same fingerprint and Conflict for another; nothing runs.
// Proves threat:restored-backup (docs/threat-model.md).
func testRetiredScopeRefused(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.expiring("conformance.retired", 0)
	done := e.complete(e.reserve(c), outcome("retired", 1))
	e.setNow(base.Add(2 * retentionPeriod))
	e.wantPrune(10, 1, 0)
	other := c
	other.Fingerprint = e.fingerprint()
	for _, cl := range []struct {
		name  string
		claim registry.Claim
		want  registry.Verdict
	}{{"same fingerprint", c, registry.Retired}, {"other fingerprint", other, registry.Conflict}} {
		rec, created, err := e.h.Store.Reserve(e.ctx, cl.claim)
		if err != nil || created || rec.OperationID != done.OperationID || !rec.Retired() || rec.Response != nil {
			t.Errorf("%s: Reserve on a tombstone: created %v err %v id %s retired %v, want the tombstone of %s",
				cl.name, created, err, rec.OperationID, rec.Retired(), done.OperationID)
		}
		if v := registry.Decide(rec, false, cl.claim.Fingerprint); v != cl.want {
			t.Errorf("%s: Decide on a tombstone = %v, want %v", cl.name, v, cl.want)
		}
		res, err := e.h.ClaimAndExecute(e.ctx, cl.claim, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
			t.Errorf("%s: ClaimAndExecute ran the business function on a tombstone", cl.name)
			return outcome("again", 0), nil
		})
		if err != nil || res.Verdict != cl.want || res.Record.OperationID != done.OperationID {
			t.Errorf("%s: ClaimAndExecute on a tombstone: %v on %s, err %v; want %v on %s",
				cl.name, res.Verdict, res.Record.OperationID, err, cl.want, done.OperationID)
		}
	}
	e.setNow(base.AddDate(50, 0, 0))
	e.wantPrune(10, 0, 0)
	if rec, created, err := e.h.Store.Reserve(e.ctx, c); err != nil || created || !rec.Retired() {
		t.Errorf("Reserve decades later: created %v retired %v err %v, want the tombstone", created, rec.Retired(), err)
	}
	if n := e.effects(done.OperationID); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
}

// testTombstoneTTL: a tombstone whose claim gave a TombstoneTTL is deleted
// TombstoneTTL after its retirement, with its published outbox messages
// (unpublished ones stay), effect attempts, reconciliation log and
// recovery attempts; the key
// is then free and Reserve creates a new operation. Without TTL the
// tombstone stays.
func testTombstoneTTL(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const ttl = 30 * time.Minute
	e.setNow(base)
	keep := e.complete(e.reserve(e.expiring("conformance.ttl", 0)), outcome("keep", 0))
	cFree := e.expiring("conformance.ttl", ttl)
	rec := e.reserve(cFree)
	if rec.TombstoneTTL != ttl {
		t.Errorf("reserved record has TombstoneTTL %v, want %v", rec.TombstoneTTL, ttl)
	}
	if _, err := e.h.Store.BeginEffect(e.ctx, rec, "transfer", nil); err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	rec.State = idem.StateExecuting
	free := e.complete(rec, outcome("free", 2))
	if err := e.h.Store.MarkPublished(e.ctx, []string{registry.MessageID(free.OperationID, 0)}); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	rec = e.reserve(e.expiring("conformance.ttl", ttl))
	if _, err := e.h.Store.BeginEffect(e.ctx, rec, "transfer", nil); err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	if _, err := e.h.Store.MarkUnknown(e.ctx, rec); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	// The recovery worker failed once and stopped before an operator
	// settled it: its attempt row (display only) outlives the
	// settlement, not the record.
	if _, err := registry.RecordRecoveryAttempt(e.ctx, e.h.Store, rec.OperationID, "GET /transfers/k: connection refused", base, base.Add(time.Minute)); err != nil {
		t.Fatalf("RecordRecoveryAttempt: %v", err)
	}
	reconciled, err := e.h.Store.Reconcile(e.ctx, rec.OperationID, registry.Reconciliation{Outcome: idem.StateSucceeded,
		Response: outcome("reconciled", 0).Response, Method: registry.ReconcileOperator, Actor: "conformance", Evidence: "test"})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}

	retired := base.Add(2 * retentionPeriod)
	e.setNow(retired)
	e.wantPrune(10, 3, 0)
	e.checkTombstone("kept forever", keep, retired)
	e.checkTombstone("with a TTL", free, retired)
	e.checkTombstone("reconciled, with a TTL", reconciled, retired)
	e.setNow(retired.Add(ttl - time.Microsecond))
	e.wantPrune(10, 0, 0)
	e.setNow(retired.Add(ttl))
	e.wantPrune(1, 0, 1)
	e.wantPrune(1, 0, 1)
	e.wantPrune(1, 0, 0)
	for _, r := range []registry.Record{free, reconciled} {
		if _, err := e.h.Store.Get(e.ctx, r.Scope); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("Get of a deleted tombstone: %v, want ErrNotFound", err)
		}
		if _, err := e.h.Store.GetByID(e.ctx, r.OperationID); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("GetByID of a deleted tombstone: %v, want ErrNotFound", err)
		}
		if n := e.count(countEffectRows, r.OperationID) + e.count(countReconciliationRows, r.OperationID) +
			e.count(countRecoveryAttemptRows, r.OperationID); n != 0 {
			t.Errorf("%d effect, reconciliation and recovery-attempt rows left of a deleted tombstone", n)
		}
	}
	unpublished := registry.MessageID(free.OperationID, 1)
	if n, m := e.outbox(free.OperationID),
		e.count(`SELECT count(*) FROM idem_outbox WHERE message_id = $1 AND published_at IS NULL`, unpublished); n != 1 || m != 1 {
		t.Errorf("outbox of a deleted tombstone: %d rows, unpublished %s kept %d; want only it", n, unpublished, m)
	}
	if n := e.effects(free.OperationID); n != 1 {
		t.Errorf("deleting the tombstone touched the business rows: %d, want 1", n)
	}

	again, created, err := e.h.Store.Reserve(e.ctx, cFree)
	if err != nil || !created || again.OperationID == free.OperationID || again.Retired() {
		t.Errorf("Reserve after the tombstone was deleted: created %v err %v id %s, want a new operation", created, err, again.OperationID)
	}
	e.setNow(base.AddDate(100, 0, 0))
	e.wantPrune(10, 1, 0) // the new reservation, abandoned a century ago, retires
	if rec, err := e.h.Store.Get(e.ctx, cFree.Scope); err != nil || !rec.Retired() || rec.State != idem.StateReserved {
		t.Errorf("the abandoned reservation: state %s retired %v err %v, want a RESERVED tombstone", rec.State, rec.Retired(), err)
	}
	e.checkTombstone("kept forever, a century on", keep, retired)
}

// testTombstoneImmutable: the database refuses to change a tombstone in any
// way or to delete one kept forever, to delete, half-retire or otherwise
// change a live terminal record, and to retire a record that is not
// terminal; the one legal change of a terminal record is its retirement.
// Proves threat:editing-finished-records (docs/threat-model.md).
func testTombstoneImmutable(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	lasting := func(ttl time.Duration) registry.Claim {
		c := e.expiring("conformance.immutable", ttl)
		c.Retention = 3 * retentionPeriod
		return c
	}
	tomb := e.complete(e.reserve(e.expiring("conformance.immutable", 0)), outcome("tomb", 0))
	live := e.complete(e.reserve(lasting(0)), outcome("live", 0))
	byHand := e.complete(e.reserve(lasting(0)), outcome("by-hand", 0))
	withTTL := e.complete(e.reserve(lasting(time.Hour)), outcome("ttl", 0))
	var inFlight []registry.Record
	for _, s := range []idem.State{idem.StateReserved, idem.StateExecuting, idem.StateUnknown} {
		c := e.expiring("conformance.immutable", 0)
		c.Lease = liveLease
		rec := e.reserve(c)
		for _, step := range pathTo(s) {
			if err := e.move(c.Scope, step); err != nil {
				t.Fatalf("moving a record to %s: %v", step, err)
			}
		}
		rec.State = s
		inFlight = append(inFlight, rec)
	}
	at := base.Add(2 * retentionPeriod)
	e.setNow(at)
	e.wantPrune(10, 1, 0)
	tomb = e.checkTombstone("pruned", tomb, at)

	refuse := func(what, sql string, args ...any) {
		t.Helper()
		if err := e.h.Exec(e.ctx, sql, args...); err == nil {
			t.Errorf("the database accepted: %s", what)
		}
	}
	const dropResponse = `resp_status = NULL, resp_media_type = NULL, resp_location = NULL, resp_etag = NULL,
		resp_body = NULL, resp_digest = NULL`
	d := snapshot.Digest()
	ts := tomb.Scope[:]
	refuse("a tombstone's body restored", `UPDATE idem_operations SET resp_body = $1 WHERE scope = $2`, snapshot.Body, ts)
	refuse("a tombstone un-retired", `UPDATE idem_operations SET retired_at = NULL WHERE scope = $1`, ts)
	refuse("a tombstone's response restored", `UPDATE idem_operations SET retired_at = NULL, resp_status = $1,
		resp_media_type = $2, resp_location = '', resp_etag = '', resp_body = $3, resp_digest = $4 WHERE scope = $5`,
		snapshot.Status, snapshot.MediaType, snapshot.Body, d[:], ts)
	refuse("a tombstone's state changed", `UPDATE idem_operations SET state = 'FAILED_FINAL' WHERE scope = $1`, ts)
	refuse("a tombstone given a deletion time", `UPDATE idem_operations SET tombstone_until = expires_at WHERE scope = $1`, ts)
	refuse("a tombstone touched", `UPDATE idem_operations SET updated_at = created_at WHERE scope = $1`, ts)
	refuse("a tombstone kept forever deleted", `DELETE FROM idem_operations WHERE scope = $1`, ts)
	e.checkTombstone("after refused changes", tomb, at)

	ls := live.Scope[:]
	refuse("a live terminal record deleted", `DELETE FROM idem_operations WHERE scope = $1`, ls)
	refuse("a terminal record's expiry changed", `UPDATE idem_operations SET expires_at = created_at WHERE scope = $1`, ls)
	refuse("a terminal record retired with its response", `UPDATE idem_operations SET retired_at = updated_at WHERE scope = $1`, ls)
	refuse("a terminal record retired into another state", `UPDATE idem_operations SET retired_at = updated_at,
		state = 'FAILED_FINAL', `+dropResponse+` WHERE scope = $1`, ls)
	refuse("a tombstone with a TTL given no deletion time", `UPDATE idem_operations SET retired_at = updated_at, `+
		dropResponse+` WHERE scope = $1`, withTTL.Scope[:])
	e.checkLive("after refused changes", live)
	e.checkLive("with a TTL, after refused changes", withTTL)
	for _, rec := range inFlight {
		rs := rec.Scope[:]
		refuse(string(rec.State)+" retired", `UPDATE idem_operations SET retired_at = updated_at WHERE scope = $1`, rs)
		refuse(string(rec.State)+" retired into SUCCEEDED without response",
			`UPDATE idem_operations SET state = 'SUCCEEDED', retired_at = updated_at WHERE scope = $1`, rs)
		if rec.State != idem.StateReserved { // deleting a reservation is Release
			refuse(string(rec.State)+" deleted", `DELETE FROM idem_operations WHERE scope = $1`, rs)
		}
		e.checkLive(string(rec.State)+" after refused changes", rec)
	}
	// The one legal change: retirement, by hand here.
	e.exec(`UPDATE idem_operations SET retired_at = updated_at, `+dropResponse+` WHERE scope = $1`, byHand.Scope[:])
	e.checkTombstone("retired by hand", byHand, byHand.UpdatedAt)

	e.h.Store.Close()
	if _, err := e.h.Store.Prune(e.ctx, 10); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("Prune on a closed store: %v, want an error wrapping ErrUnavailable", err)
	}
}
