package registrytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of the one-transaction style, Store.ExecuteOnce: the business
// function runs first, the record is inserted already terminal in the same
// transaction, and the insert is the acceptance point. The business
// function may still be called on a call that then loses the scope (its
// statements are stopped by the claim: claim.go), so these cases check
// what committed — business rows, outbox rows, records — rather than how
// often it was called.

const countScope = `SELECT count(*) FROM idem_operations WHERE scope = $1`

// onceObs is what one ExecuteOnce call returned, with the record its
// business function was handed at each call (nil when it did not run).
type onceObs struct {
	res registry.Result
	err error
	saw []registry.Record
}

// once calls ExecuteOnce for c with fn and records every call of fn. It is
// safe to call from several goroutines: each call has its own onceObs.
func (e *env) once(c registry.Claim, fn registry.BusinessFunc) onceObs {
	var o onceObs
	o.res, o.err = e.h.Store.ExecuteOnce(e.ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		o.saw = append(o.saw, rec)
		return fn(ctx, tx, rec)
	})
	return o
}

// checkSeen checks the record a business function of ExecuteOnce was
// handed: the claim's fields, a new operation ID, generation 1, no
// response. (Its state is checked by testOnceHandsExecuting.)
func checkSeen(t *testing.T, what string, rec registry.Record, c registry.Claim) {
	t.Helper()
	switch {
	case !strings.HasPrefix(rec.OperationID, "op_"):
		t.Errorf("%s: the business function got operation ID %q", what, rec.OperationID)
	case rec.Scope != c.Scope || rec.Fingerprint != c.Fingerprint || rec.Operation != c.Operation ||
		rec.Owner != c.Owner || rec.WriterEpoch != c.WriterEpoch:
		t.Errorf("%s: the business function got %+v, which does not carry the claim %+v", what, rec, c)
	case rec.OwnerGen != 1 || rec.Response != nil:
		t.Errorf("%s: the business function got gen %d response %v, want gen 1 without response",
			what, rec.OwnerGen, rec.Response)
	}
}

// testOnceHandsExecuting: the business function of ExecuteOnce sees the
// record as it will be stored, in state EXECUTING (Store.ExecuteOnce), on
// success and on failure alike.
func testOnceHandsExecuting(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	for _, fn := range []registry.BusinessFunc{effect("executing", outcome("executing", 0)), failing(errBusiness)} {
		o := e.once(e.claim("conformance.once-state"), fn)
		if len(o.saw) != 1 {
			t.Fatalf("the business function ran %d times, want once (verdict %v err %v)", len(o.saw), o.res.Verdict, o.err)
		}
		if s := o.saw[0].State; s != idem.StateExecuting {
			t.Errorf("the business function got a record in state %s, want EXECUTING (verdict %v err %v)", s, o.res.Verdict, o.err)
		}
	}
}

// checkNothingFrom checks that no business or outbox row of any operation
// a business function was handed survived.
func checkNothingFrom(e *env, what string, saw []registry.Record) {
	e.t.Helper()
	for _, r := range saw {
		if n := e.effects(r.OperationID) + e.outbox(r.OperationID); n != 0 {
			e.t.Errorf("%s: %d business and outbox rows of the rolled-back %s survived", what, n, r.OperationID)
		}
	}
}

// checkNotStored checks that c's scope has no record and the database no
// business or outbox row at all.
func checkNotStored(e *env, what string, c registry.Claim) {
	e.t.Helper()
	if rec, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		e.t.Errorf("%s: Get: state %s id %s err %v, want ErrNotFound", what, rec.State, rec.OperationID, err)
	}
	if n := e.count(countAllEffects) + e.count(countAllOutbox); n != 0 {
		e.t.Errorf("%s: %d business and outbox rows, want none", what, n)
	}
}

// testOnceExecutesAndStores: ExecuteOnce runs the business function on a
// record it has not stored yet, then stores it terminal with the response,
// its digest and the outbox rows, all committed together; the same claim
// again replays exactly that record and commits nothing more.
func testOnceExecutesAndStores(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.once")
	c.Retention = 48 * time.Hour
	out := outcome("once", 2)
	visible := int64(-1) // registry records at c's scope, as seen from elsewhere while fn ran
	o := e.once(c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		if _, err := effect("once", out)(ctx, tx, rec); err != nil {
			return out, err
		}
		var n int64 // the transaction sees its own write
		if err := tx.QueryRow(ctx, countEffects, rec.OperationID).Scan(&n); err != nil || n != 1 {
			return out, fmt.Errorf("QueryRow in the business transaction: %d rows, %v", n, err)
		}
		if tx.Native() == nil {
			return out, fmt.Errorf("Tx.Native returned nil")
		}
		visible = e.count(countScope, c.Scope[:])
		return out, nil
	})
	if o.err != nil || o.res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce: verdict %v err %v, want execute", o.res.Verdict, o.err)
	}
	if len(o.saw) != 1 {
		t.Fatalf("the business function ran %d times, want once", len(o.saw))
	}
	checkSeen(t, "first call", o.saw[0], c)
	if visible > 0 {
		t.Errorf("while the business function ran, %d records of the scope were visible outside its transaction", visible)
	}
	done := o.res.Record
	opID := done.OperationID
	switch {
	case opID != o.saw[0].OperationID:
		t.Errorf("stored operation ID %s, the business function got %s", opID, o.saw[0].OperationID)
	case done.Scope != c.Scope || done.Fingerprint != c.Fingerprint || done.Operation != c.Operation ||
		done.Owner != c.Owner || done.WriterEpoch != c.WriterEpoch || done.Contract != idem.ContractVersion:
		t.Errorf("stored record %+v does not carry the claim %+v", done, c)
	case done.State != idem.StateSucceeded || done.OwnerGen != 1 || done.Retired():
		t.Errorf("stored record: state %s gen %d retired %v, want SUCCEEDED gen 1 live", done.State, done.OwnerGen, done.Retired())
	case !sameResponse(done.Response, out.Response):
		t.Errorf("stored response %+v, want %+v", done.Response, out.Response)
	case !done.CreatedAt.Equal(base) || !done.UpdatedAt.Equal(base) || !done.ExpiresAt.Equal(base.Add(c.Retention)):
		t.Errorf("stored times: created %v updated %v expires %v, want %v, %v, %v",
			done.CreatedAt, done.UpdatedAt, done.ExpiresAt, base, base, base.Add(c.Retention))
	}
	checkReads(e, done) // Get and GetByID verify the stored digest
	d := out.Response.Digest()
	if n := e.count(countDigest, c.Scope[:], d[:]); n != 1 {
		t.Errorf("the stored digest is not the response's digest")
	}
	if n := e.effects(opID); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
	checkOutboxRows(e, opID, 2)
	msgs, err := e.h.Store.ClaimOutbox(e.ctx, 10, time.Minute)
	if err != nil || len(msgs) != len(out.Outbox) {
		t.Fatalf("ClaimOutbox: %d messages, err %v; want %d", len(msgs), err, len(out.Outbox))
	}
	for i, m := range msgs {
		w := out.Outbox[i]
		if m.ID != registry.MessageID(opID, i) || m.OperationID != opID || m.Topic != w.Topic ||
			!bytes.Equal(m.Payload, w.Payload) || !m.CreatedAt.Equal(base) {
			t.Errorf("outbox message %d: {%s %s %s %q %v}, want {%s %s %s %q %v}", i, m.ID, m.OperationID, m.Topic, m.Payload, m.CreatedAt,
				registry.MessageID(opID, i), opID, w.Topic, w.Payload, base)
		}
	}

	// The same claim, later: the stored record, nothing run that commits.
	e.setNow(base.Add(time.Minute))
	again := e.once(c, effect("again", outcome("again", 3)))
	if again.err != nil || again.res.Verdict != registry.Replay {
		t.Fatalf("second ExecuteOnce: verdict %v err %v, want replay", again.res.Verdict, again.err)
	}
	if d := recordDiff(again.res.Record, done); d != nil {
		t.Errorf("the replay differs from the stored record: %v", d)
	}
	t.Logf("the business function ran %d times on the replay", len(again.saw))
	checkNothingFrom(e, "replay", again.saw)
	if n := e.count(countAllEffects); n != 1 {
		t.Errorf("%d business rows after the replay, want 1", n)
	}
	if n := e.count(countAllOutbox); n != 2 {
		t.Errorf("%d outbox rows after the replay, want 2", n)
	}
	if n := e.count(countRecords); n != 1 {
		t.Errorf("%d records after the replay, want 1", n)
	}
}

// testOnceTerminalStates: FAILED_FINAL and REJECTED (a declared 4xx: a
// business refusal after acceptance) are stored as they are, with their
// response and outbox rows, and replayed.
func testOnceTerminalStates(t *testing.T, nh NewHarness) {
	for _, s := range []idem.State{idem.StateFailedFinal, idem.StateRejected} {
		t.Run(string(s), func(t *testing.T) {
			e := setup(t, nh)
			c := e.claim("conformance.once-final")
			out := finalOutcome(string(s), s)
			out.Outbox = outcome(string(s), 1).Outbox
			o := e.once(c, effect("final", out))
			if o.err != nil || o.res.Verdict != registry.Execute {
				t.Fatalf("ExecuteOnce with a %s outcome: verdict %v err %v, want execute", s, o.res.Verdict, o.err)
			}
			done := o.res.Record
			if done.State != s || !sameResponse(done.Response, out.Response) {
				t.Errorf("stored %s %+v, want %s %+v", done.State, done.Response, s, out.Response)
			}
			checkReads(e, done)
			if n := e.effects(done.OperationID); n != 1 {
				t.Errorf("%d business rows, want 1", n)
			}
			checkOutboxRows(e, done.OperationID, 1)
			again := e.once(c, effect("again", outcome("again", 0)))
			if again.err != nil || again.res.Verdict != registry.Replay || recordDiff(again.res.Record, done) != nil {
				t.Errorf("second ExecuteOnce: verdict %v err %v record %+v, want a replay of %+v", again.res.Verdict, again.err, again.res.Record, done)
			}
			checkNothingFrom(e, "replay", again.saw)
		})
	}
}

// raceOnce runs ExecuteOnce for every claim at once, each with the effect
// business function, and returns what each got.
func raceOnce(e *env, claims []registry.Claim, out registry.Outcome) []onceObs {
	hist := make([]onceObs, len(claims))
	race(len(claims), func(i int) { hist[i] = e.once(claims[i], effect("once", out)) })
	return hist
}

// checkOnceRace checks a race of ExecuteOnce calls on one scope: if win is
// nil, exactly one executed and its fingerprint wins, else nothing executed
// and *win is the record every call must get; requests with the winning
// fingerprint replay the winner's record exactly (nothing is ever in
// flight in the registry, so InProgress is wrong), the others conflict;
// only the winner's business and outbox rows exist. It returns the
// winning record.
func checkOnceRace(e *env, round string, claims []registry.Claim, hist []onceObs, out registry.Outcome, win *registry.Record) registry.Record {
	t := e.t
	t.Helper()
	if win == nil {
		for i, o := range hist {
			if o.err == nil && o.res.Verdict == registry.Execute {
				if win != nil {
					t.Fatalf("%s: two requests executed (%s and %s, request %d)", round, win.OperationID, o.res.Record.OperationID, i)
				}
				win = &hist[i].res.Record
			}
		}
		if win == nil {
			t.Fatalf("%s: no request executed", round)
		}
		if win.State != idem.StateSucceeded || win.OwnerGen != 1 || !sameResponse(win.Response, out.Response) {
			t.Errorf("%s: executed record: state %s gen %d response %+v, want SUCCEEDED gen 1 %+v",
				round, win.State, win.OwnerGen, win.Response, out.Response)
		}
	}
	counts := map[registry.Verdict]int{}
	runs := 0
	for i, o := range hist {
		runs += len(o.saw)
		fp := claims[i].Fingerprint
		switch {
		case o.err != nil:
			t.Errorf("%s: request %d: %v", round, i, o.err)
			continue
		case o.res.Verdict == registry.Execute && o.res.Record.OperationID == win.OperationID:
		case o.res.Record.OperationID != win.OperationID:
			t.Errorf("%s: request %d got %v on operation %s, the winner is %s", round, i, o.res.Verdict, o.res.Record.OperationID, win.OperationID)
		case fp != win.Fingerprint && o.res.Verdict != registry.Conflict:
			t.Errorf("%s: request %d (other fingerprint): verdict %v, want conflict", round, i, o.res.Verdict)
		case fp == win.Fingerprint && o.res.Verdict != registry.Replay:
			t.Errorf("%s: request %d (winner's fingerprint): verdict %v on state %s, want replay", round, i, o.res.Verdict, o.res.Record.State)
		case fp == win.Fingerprint && recordDiff(o.res.Record, *win) != nil:
			t.Errorf("%s: request %d replayed a record that differs from the winner's: %v", round, i, recordDiff(o.res.Record, *win))
		}
		counts[o.res.Verdict]++
		for _, r := range o.saw {
			if r.OperationID != win.OperationID {
				checkNothingFrom(e, fmt.Sprintf("%s: request %d", round, i), []registry.Record{r})
			}
		}
	}
	t.Logf("%s: verdicts %v, business function ran %d times", round, counts, runs)
	if n := e.count(countScope, win.Scope[:]); n != 1 {
		t.Errorf("%s: %d records of the scope, want 1", round, n)
	}
	if n := e.effects(win.OperationID); n != 1 {
		t.Errorf("%s: %d business rows of the winner, want 1", round, n)
	}
	checkOutboxRows(e, win.OperationID, len(out.Outbox))
	return *win
}

// testOnceConcurrentSameScope: racers call ExecuteOnce on one claim at
// once: one executes, every other replays its record; one business row
// and one operation's outbox rows commit. With one request of another
// fingerprint among them, whoever wins, every request of the other
// fingerprint conflicts.
// Proves threat:concurrent-duplicates (docs/threat-model.md).
func testOnceConcurrentSameScope(t *testing.T, nh NewHarness) {
	t.Run("SameFingerprint", func(t *testing.T) {
		t.Parallel()
		e := setup(t, nh)
		c := e.claim("conformance.once-race")
		out := outcome("once-race", 2)
		claims := make([]registry.Claim, racers)
		for i := range claims {
			claims[i] = c
		}
		checkOnceRace(e, "race", claims, raceOnce(e, claims, out), out, nil)
		if n := e.count(countAllEffects) + e.count(countAllOutbox); n != 1+2 {
			t.Errorf("%d business and outbox rows in all, want the winner's 3", n)
		}
	})
	t.Run("MixedFingerprints", func(t *testing.T) {
		t.Parallel()
		e := setup(t, nh)
		out := outcome("once-mixed", 1)
		claims, odd := mixedClaims(e, "conformance.once-mixed")
		hist := raceOnce(e, claims, out)
		win := checkOnceRace(e, "race", claims, hist, out, nil)
		t.Logf("the other fingerprint won: %v", win.Fingerprint == claims[odd].Fingerprint)

		// The odd fingerprint executes first; then the majority races and
		// every one of it conflicts.
		claims, odd = mixedClaims(e, "conformance.once-mixed")
		first := e.once(claims[odd], effect("odd", out))
		if first.err != nil || first.res.Verdict != registry.Execute {
			t.Fatalf("odd fingerprint alone: verdict %v err %v, want execute", first.res.Verdict, first.err)
		}
		rest := append(append([]registry.Claim(nil), claims[:odd]...), claims[odd+1:]...)
		checkOnceRace(e, "odd first", rest, raceOnce(e, rest, out), out, &first.res.Record)
		if n := e.count(countAllEffects); n != 2 {
			t.Errorf("%d business rows in all, want 2 (one per scope)", n)
		}
	})
}

// testOnceRollsBackOnError: a business function's error, an outcome that
// is not terminal, or a context that ends before the commit leaves
// nothing — no record, no business or outbox row — and the scope then
// executes normally.
func testOnceRollsBackOnError(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.once-error")
	out := outcome("once-error", 2)

	o := e.once(c, func(ctx context.Context, tx registry.Tx, r registry.Record) (registry.Outcome, error) {
		if _, err := failing(errBusiness)(ctx, tx, r); err != nil {
			return out, err // an outcome with messages, and an error: nothing commits
		}
		return out, nil
	})
	if !errors.Is(o.err, errBusiness) || o.res.Verdict != 0 {
		t.Errorf("failing business function: verdict %v err %v, want its error", o.res.Verdict, o.err)
	}
	if len(o.saw) != 1 {
		t.Fatalf("the business function ran %d times, want once", len(o.saw))
	}
	checkSeen(t, "failing business function", o.saw[0], c)
	checkNotStored(e, "after a failing business function", c)

	for _, s := range []idem.State{"", idem.StateReserved, idem.StateExecuting, idem.StateUnknown, "BOGUS"} {
		bad := outcome("bad", 1)
		bad.State = s
		o := e.once(c, effect("bad", bad))
		if o.err == nil || o.res.Verdict != 0 {
			t.Errorf("outcome state %q: verdict %v err %v, want an error", s, o.res.Verdict, o.err)
		}
		if len(o.saw) != 1 {
			t.Errorf("outcome state %q: the business function ran %d times, want once", s, len(o.saw))
		}
		checkNotStored(e, fmt.Sprintf("after outcome state %q", s), c)
	}

	// The context ends inside the business function: whatever ExecuteOnce
	// says must be what is stored.
	ctx, cancel := context.WithCancel(e.ctx)
	var saw registry.Record
	res, err := e.h.Store.ExecuteOnce(ctx, c, func(ctx context.Context, tx registry.Tx, r registry.Record) (registry.Outcome, error) {
		saw = r
		_, err := effect("cancelled", out)(ctx, tx, r)
		cancel()
		return out, err
	})
	cancel()
	t.Logf("context cancelled in the business function: verdict %v err %v", res.Verdict, err)
	if err == nil {
		if res.Verdict != registry.Execute || e.effects(saw.OperationID) != 1 || e.outbox(saw.OperationID) != 2 {
			t.Errorf("ExecuteOnce reported %v without error after the cancel, but its writes are not all stored", res.Verdict)
		}
		c = e.claim("conformance.once-error") // the scope is used: go on with another
	} else {
		checkNotStored(e, "after a cancelled context", c)
	}

	done := e.once(c, effect("fine", out))
	if done.err != nil || done.res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce after the rollbacks: verdict %v err %v, want execute", done.res.Verdict, done.err)
	}
	if n := e.effects(done.res.Record.OperationID); n != 1 {
		t.Errorf("%d business rows after the execution, want 1", n)
	}
	checkOutboxRows(e, done.res.Record.OperationID, 2)
}

// testOnceExistingScope: on a scope that exists, ExecuteOnce commits
// nothing and returns Decide's verdict on the stored record with a nil
// error: InProgress for a reservation, Unknown for an UNKNOWN record,
// Retired for a tombstone, Conflict for another fingerprint on any of
// them; a stored response that does not match its digest is an error,
// never a replay.
func testOnceExistingScope(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	reserved := e.claim("conformance.once-existing")
	resRec := e.reserve(reserved)
	unknown := e.claim("conformance.once-existing")
	unkRec := e.unknown(unknown)
	retired := e.expiring("conformance.once-existing", 0)
	first := e.once(retired, effect("retired", outcome("retired", 1)))
	if first.err != nil || first.res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce of the scope to retire: verdict %v err %v", first.res.Verdict, first.err)
	}
	e.setNow(base.Add(2 * retentionPeriod))
	e.wantPrune(10, 1, 0) // the ExecuteOnce record expires like any other
	tomb := e.checkTombstone("retired by Prune", first.res.Record, base.Add(2*retentionPeriod))

	for _, tc := range []struct {
		name  string
		claim registry.Claim
		rec   registry.Record
		want  registry.Verdict
	}{
		{"reserved", reserved, resRec, registry.InProgress},
		{"unknown", unknown, unkRec, registry.Unknown},
		{"tombstone", retired, tomb, registry.Retired},
	} {
		other := tc.claim
		other.Fingerprint = e.fingerprint()
		for _, cl := range []struct {
			name  string
			claim registry.Claim
			want  registry.Verdict
		}{{"same fingerprint", tc.claim, tc.want}, {"other fingerprint", other, registry.Conflict}} {
			what := tc.name + ", " + cl.name
			o := e.once(cl.claim, effect("existing", outcome("existing", 1)))
			if o.err != nil || o.res.Verdict != cl.want || o.res.Record.OperationID != tc.rec.OperationID {
				t.Errorf("%s: verdict %v on %s err %v, want %v on %s", what, o.res.Verdict, o.res.Record.OperationID, o.err, cl.want, tc.rec.OperationID)
			}
			if tc.rec.Response == nil && o.res.Record.Response != nil {
				t.Errorf("%s: the verdict's record carries a response", what)
			}
			checkNothingFrom(e, what, o.saw)
			if got, err := e.h.Store.Get(e.ctx, tc.claim.Scope); err != nil || got.State != tc.rec.State || got.OwnerGen != tc.rec.OwnerGen ||
				got.OperationID != tc.rec.OperationID || got.Retired() != tc.rec.Retired() {
				t.Errorf("%s: record after ExecuteOnce: %s gen %d retired %v (err %v), want it unchanged: %s gen %d retired %v",
					what, got.State, got.OwnerGen, got.Retired(), err, tc.rec.State, tc.rec.OwnerGen, tc.rec.Retired())
			}
		}
	}
	if n := e.count(countAllEffects); n != 1 {
		t.Errorf("%d business rows, want the one of the retired operation", n)
	}

	// A terminal record whose body does not match its stored digest.
	tampered := e.claim("conformance.once-existing")
	rec := e.reserve(tampered)
	d := snapshot.Digest()
	e.exec(moveTerminal, string(idem.StateSucceeded), snapshot.Status, snapshot.MediaType, []byte("tampered"), d[:], tampered.Scope[:])
	o := e.once(tampered, effect("tampered", outcome("tampered", 1)))
	if !errors.Is(o.err, idem.ErrDigestMismatch) || o.res.Verdict == registry.Replay {
		t.Errorf("ExecuteOnce on a record not matching its digest: verdict %v err %v, want ErrDigestMismatch", o.res.Verdict, o.err)
	}
	checkNothingFrom(e, "tampered", o.saw)
	if n := e.effects(rec.OperationID); n != 0 {
		t.Errorf("%d business rows of the tampered operation, want 0", n)
	}
}

// testOnceFencedByEpoch: a writer older than the registry's epoch cannot
// execute a new scope: ErrWriterFenced, its business writes rolled back,
// no record; writers at or above the epoch execute and the record keeps
// their epoch.
func testOnceFencedByEpoch(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	epoch := e.bump()
	c := e.claim("conformance.once-epoch")
	c.WriterEpoch = epoch - 1
	o := e.once(c, effect("fenced", outcome("fenced", 2)))
	if !errors.Is(o.err, registry.ErrWriterFenced) || o.res.Verdict != 0 {
		t.Errorf("ExecuteOnce at epoch %d < %d: verdict %v err %v, want ErrWriterFenced", c.WriterEpoch, epoch, o.res.Verdict, o.err)
	}
	checkNothingFrom(e, "fenced", o.saw)
	checkNotStored(e, "after the fenced ExecuteOnce", c)
	if n := e.count(countRecords); n != 0 {
		t.Errorf("the fenced ExecuteOnce left %d records", n)
	}

	for _, w := range []int64{epoch, epoch + 5} {
		c.WriterEpoch = w
		o := e.once(c, effect("current", outcome("current", 1)))
		if o.err != nil || o.res.Verdict != registry.Execute || o.res.Record.WriterEpoch != w {
			t.Errorf("ExecuteOnce at epoch %d (registry %d): verdict %v epoch %d err %v, want execute at %d",
				w, epoch, o.res.Verdict, o.res.Record.WriterEpoch, o.err, w)
		}
		if n := e.effects(o.res.Record.OperationID); o.err == nil && n != 1 {
			t.Errorf("epoch %d: %d business rows, want 1", w, n)
		}
		c = e.claim("conformance.once-epoch")
	}
}

// testOnceOldWriterReplays: the fence stops new acceptances only (SPEC
// E6): as with Reserve and ClaimAndExecute, an older writer that calls
// ExecuteOnce on a finished scope gets its replay, not an error, and
// commits nothing.
func testOnceOldWriterReplays(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	epoch := e.bump()
	c := e.claim("conformance.once-epoch")
	c.WriterEpoch = epoch
	first := e.once(c, effect("current", outcome("current", 1)))
	if first.err != nil || first.res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce at the current epoch: verdict %v err %v", first.res.Verdict, first.err)
	}
	old := c
	old.WriterEpoch = epoch - 1
	o := e.once(old, effect("old", outcome("old", 1)))
	if o.err != nil || o.res.Verdict != registry.Replay || recordDiff(o.res.Record, first.res.Record) != nil {
		t.Errorf("ExecuteOnce of a finished scope by an old writer: verdict %v err %v, want a replay of %s",
			o.res.Verdict, o.err, first.res.Record.OperationID)
	}
	checkNothingFrom(e, "old writer", o.saw)
	if n := e.count(countAllEffects); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
}
