package registrytest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of effects outside the database (SPEC E1–E2): the stored attempt
// and its stable downstream key, the owner-generation fence, and UNKNOWN.

const countAttempts = `SELECT count(*) FROM idem_effects WHERE operation_id = $1`

// beginEffect begins the effect name of rec and fails the test on error.
func (e *env) beginEffect(rec registry.Record, name string) registry.Effect {
	e.t.Helper()
	eff, err := e.h.Store.BeginEffect(e.ctx, rec, name, nil)
	if err != nil {
		e.t.Fatalf("BeginEffect(%s, %q): %v", rec.OperationID, name, err)
	}
	return eff
}

// effectsOf lists rec's attempts by name and fails the test on error.
func (e *env) effectsOf(opID string) map[string]registry.Effect {
	e.t.Helper()
	effs, err := e.h.Store.Effects(e.ctx, opID)
	if err != nil {
		e.t.Fatalf("Effects(%s): %v", opID, err)
	}
	m := make(map[string]registry.Effect, len(effs))
	for _, eff := range effs {
		m[eff.Name] = eff
	}
	if len(m) != len(effs) {
		e.t.Errorf("Effects(%s) lists a name twice: %+v", opID, effs)
	}
	return m
}

// state reads the state and generation of the record with scope s.
func (e *env) state(s idem.ScopeHash) (idem.State, int64) {
	e.t.Helper()
	rec, err := e.h.Store.Get(e.ctx, s)
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	return rec.State, rec.OwnerGen
}

// unknown reserves c, begins an effect and marks the record UNKNOWN.
func (e *env) unknown(c registry.Claim) registry.Record {
	e.t.Helper()
	rec := e.reserve(c)
	e.beginEffect(rec, "transfer")
	u, err := e.h.Store.MarkUnknown(e.ctx, rec)
	if err != nil {
		e.t.Fatalf("MarkUnknown: %v", err)
	}
	return u
}

// testEffectKeyStable: an operation's effect has one downstream key, the
// same on every BeginEffect, after a takeover (a new owner generation), and
// the stored attempt keeps its creation time; other effects or operations
// get other keys.
func testEffectKeyStable(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.effect-key")
	c.Lease = time.Minute
	rec := e.reserve(c)
	first := e.beginEffect(rec, "transfer")
	want := registry.Effect{OperationID: rec.OperationID, Name: "transfer",
		DownstreamKey: registry.DownstreamKey(rec.OperationID, "transfer"), OwnerGen: 1, CreatedAt: base, UpdatedAt: base}
	if !sameEffect(first, want) {
		t.Errorf("first BeginEffect: %+v, want %+v", first, want)
	}
	e.setNow(base.Add(time.Second))
	if again := e.beginEffect(rec, "transfer"); again.DownstreamKey != first.DownstreamKey || !again.CreatedAt.Equal(base) {
		t.Errorf("second BeginEffect: key %q created %v, want %q and %v", again.DownstreamKey, again.CreatedAt, first.DownstreamKey, base)
	}
	other := e.beginEffect(rec, "notify")
	if other.DownstreamKey == first.DownstreamKey || other.DownstreamKey != registry.DownstreamKey(rec.OperationID, "notify") {
		t.Errorf("effect notify got key %q (transfer: %q)", other.DownstreamKey, first.DownstreamKey)
	}

	// Recovery takes the operation over: the new generation gets the same
	// key and the stale one can begin nothing.
	e.setNow(base.Add(time.Hour))
	cur, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute)
	if err != nil || cur.OwnerGen != 2 || cur.State != idem.StateExecuting {
		t.Fatalf("TakeOver: gen %d state %s err %v, want gen 2 EXECUTING", cur.OwnerGen, cur.State, err)
	}
	if _, err := e.h.Store.BeginEffect(e.ctx, rec, "transfer", nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("BeginEffect by the stale generation: %v, want ErrFenced", err)
	}
	if _, err := e.h.Store.BeginEffect(e.ctx, rec, "new", nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("BeginEffect of a new effect by the stale generation: %v, want ErrFenced", err)
	}
	taken := e.beginEffect(cur, "transfer")
	if taken.DownstreamKey != first.DownstreamKey || taken.OwnerGen != 2 || !taken.CreatedAt.Equal(base) ||
		!taken.UpdatedAt.Equal(base.Add(time.Hour)) {
		t.Errorf("BeginEffect after takeover: %+v, want key %q, gen 2, created %v", taken, first.DownstreamKey, base)
	}
	effs := e.effectsOf(rec.OperationID)
	if len(effs) != 2 || effs["transfer"].OwnerGen != 2 || effs["notify"].OwnerGen != 1 ||
		effs["transfer"].DownstreamKey != first.DownstreamKey || effs["notify"].DownstreamKey != other.DownstreamKey {
		t.Errorf("Effects after takeover: %+v", effs)
	}
	// Another operation's effect of the same name has another key.
	rec2 := e.reserve(e.claim("conformance.effect-key"))
	if k := e.beginEffect(rec2, "transfer").DownstreamKey; k == first.DownstreamKey {
		t.Errorf("two operations share the downstream key %q", k)
	}
}

// testBeginEffectDurable: BeginEffect moves RESERVED to EXECUTING and
// stores the attempt, both visible to fresh reads; it begins nothing for a
// record that is terminal, released or whose writer is fenced; the
// database refuses to change an attempt's key.
func testBeginEffectDurable(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.effect-begin")
	rec := e.reserve(c)
	if _, err := e.h.Store.BeginEffect(e.ctx, rec, "", nil); err == nil || errors.Is(err, registry.ErrFenced) {
		t.Errorf("BeginEffect with an empty name: %v, want a plain error", err)
	}
	eff := e.beginEffect(rec, "transfer")
	if st, gen := e.state(c.Scope); st != idem.StateExecuting || gen != 1 {
		t.Errorf("after BeginEffect: state %s gen %d, want EXECUTING gen 1", st, gen)
	}
	if got := e.effectsOf(rec.OperationID)["transfer"]; !sameEffect(got, eff) || got.Handle != "" || got.Result != "" {
		t.Errorf("Effects: %+v, want %+v with an empty handle and result", got, eff)
	}
	if n := e.count(`SELECT count(*) FROM idem_effects WHERE operation_id = $1 AND downstream_key = $2
		AND handle IS NULL AND result IS NULL`, rec.OperationID, eff.DownstreamKey); n != 1 {
		t.Errorf("%d stored attempts with the key and no handle, want 1", n)
	}
	for _, q := range []string{
		`UPDATE idem_effects SET downstream_key = 'idem-other' WHERE operation_id = $1`,
		`UPDATE idem_effects SET result = 'maybe' WHERE operation_id = $1`,
		`UPDATE idem_effects SET owner_gen = 0 WHERE operation_id = $1`,
	} {
		if err := e.h.Exec(e.ctx, q, rec.OperationID); err == nil {
			t.Errorf("the database accepted %q", q)
		}
	}
	// A record that was RESERVED in the caller's hands completes from
	// EXECUTING; a terminal record begins nothing.
	done := e.complete(rec, outcome("effect-begin", 0))
	if _, err := e.h.Store.BeginEffect(e.ctx, done, "transfer", nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("BeginEffect of a terminal record: %v, want ErrFenced", err)
	}
	if _, err := e.h.Store.BeginEffect(e.ctx, done, "late", nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("BeginEffect of a new effect of a terminal record: %v, want ErrFenced", err)
	}
	if n := e.count(countAttempts, rec.OperationID); n != 1 {
		t.Errorf("%d attempts after refused BeginEffect calls, want 1", n)
	}
	released := e.reserve(e.claim("conformance.effect-begin"))
	if err := e.h.Store.Release(e.ctx, released); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := e.h.Store.BeginEffect(e.ctx, released, "transfer", nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("BeginEffect of a released record: %v, want ErrFenced", err)
	}
	if n := e.count(countAttempts, released.OperationID); n != 0 {
		t.Errorf("%d attempts of a released record, want 0", n)
	}

	// A writer older than the registry's epoch begins no effect.
	old := e.claim("conformance.effect-begin")
	old.WriterEpoch = 0
	oldRec := e.reserve(old)
	e.bump()
	if _, err := e.h.Store.BeginEffect(e.ctx, oldRec, "transfer", nil); !errors.Is(err, registry.ErrWriterFenced) {
		t.Errorf("BeginEffect by a fenced writer: %v, want ErrWriterFenced", err)
	}
	if st, _ := e.state(old.Scope); st != idem.StateReserved || e.count(countAttempts, oldRec.OperationID) != 0 {
		t.Errorf("fenced BeginEffect changed something: state %s", st)
	}
}

// testStaleGenerationCannotRecord: RecordEffect stores the handle and
// result of a stored attempt, keeps what an empty value does not replace,
// passes the attempt to the caller's generation, and is fenced for a
// stale generation, an attempt never begun and a terminal record.
func testStaleGenerationCannotRecord(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.effect-record")
	c.Lease = time.Minute
	rec := e.reserve(c)
	if err := e.h.Store.RecordEffect(e.ctx, rec, "transfer", "tr_0", registry.EffectSucceeded, nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect before BeginEffect: %v, want ErrFenced", err)
	}
	e.beginEffect(rec, "transfer")
	if err := e.h.Store.RecordEffect(e.ctx, rec, "transfer", "tr_1", "", nil); err != nil {
		t.Fatalf("RecordEffect of the handle: %v", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, rec, "transfer", "", registry.EffectSucceeded, nil); err != nil {
		t.Fatalf("RecordEffect of the result: %v", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, rec, "transfer", "tr_x", "maybe", nil); err == nil || errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect with result \"maybe\": %v, want a plain error", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, rec, "other", "tr_1", registry.EffectFailed, nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect of an effect never begun: %v, want ErrFenced", err)
	}
	if got := e.effectsOf(rec.OperationID)["transfer"]; got.Handle != "tr_1" || got.Result != registry.EffectSucceeded {
		t.Errorf("recorded attempt: handle %q result %q, want tr_1 succeeded", got.Handle, got.Result)
	}

	e.setNow(base.Add(time.Hour))
	cur, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, rec, "transfer", "tr_stale", registry.EffectFailed, nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect by the stale generation: %v, want ErrFenced", err)
	}
	if again := e.beginEffect(cur, "transfer"); again.Handle != "tr_1" || again.Result != registry.EffectSucceeded || again.OwnerGen != 2 {
		t.Errorf("BeginEffect after takeover lost the recorded handle or result: %+v", again)
	}
	if err := e.h.Store.RecordEffect(e.ctx, cur, "transfer", "tr_1", registry.EffectSucceeded, nil); err != nil {
		t.Errorf("RecordEffect by the new generation: %v", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, rec, "transfer", "tr_stale", registry.EffectFailed, nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect by the stale generation after the new one began: %v, want ErrFenced", err)
	}
	// A recovery that took over records what the provider told it
	// without beginning the effect again: the attempt passes to it.
	e.beginEffect(cur, "notify")
	e.setNow(base.Add(2 * time.Hour))
	third, err := e.h.Store.TakeOver(e.ctx, cur, time.Minute)
	if err != nil {
		t.Fatalf("second TakeOver: %v", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, third, "notify", "n_1", registry.EffectSucceeded, nil); err != nil {
		t.Errorf("RecordEffect by a recovery that did not begin the effect: %v", err)
	}
	if got := e.effectsOf(rec.OperationID)["notify"]; got.OwnerGen != 3 || got.Handle != "n_1" {
		t.Errorf("attempt recorded by the recovery: %+v, want gen 3 handle n_1", got)
	}
	if err := e.h.Store.RecordEffect(e.ctx, cur, "notify", "n_stale", "", nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect by generation 2 after the recovery: %v, want ErrFenced", err)
	}
	cur = third
	done := e.complete(cur, outcome("effect-record", 0))
	if err := e.h.Store.RecordEffect(e.ctx, done, "transfer", "tr_3", registry.EffectFailed, nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect of a terminal record: %v, want ErrFenced", err)
	}
	got := e.effectsOf(rec.OperationID)["transfer"]
	if got.Handle != "tr_1" || got.Result != registry.EffectSucceeded || got.OwnerGen != 2 {
		t.Errorf("attempt after the fenced calls: %+v, want tr_1 succeeded gen 2", got)
	}
}

// testMarkUnknown: only the current generation moves EXECUTING to
// UNKNOWN; an UNKNOWN record is never taken over, completed, released or
// given a new effect, but its attempt's handle can still be recorded; the
// writer epoch does not fence MarkUnknown.
func testMarkUnknown(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.unknown")
	c.Lease = time.Minute
	rec := e.reserve(c)
	if _, err := e.h.Store.MarkUnknown(e.ctx, rec); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("MarkUnknown of a RESERVED record: %v, want ErrFenced", err)
	}
	e.beginEffect(rec, "transfer")
	e.setNow(base.Add(time.Hour))
	cur, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	if _, err := e.h.Store.MarkUnknown(e.ctx, rec); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("MarkUnknown by the stale generation: %v, want ErrFenced", err)
	}
	now := base.Add(time.Hour + time.Second)
	e.setNow(now)
	u, err := e.h.Store.MarkUnknown(e.ctx, cur)
	if err != nil || u.State != idem.StateUnknown || u.OwnerGen != 2 || u.Response != nil || !u.UpdatedAt.Equal(now) ||
		u.OperationID != rec.OperationID {
		t.Fatalf("MarkUnknown: %+v, %v; want UNKNOWN gen 2 updated at %v", u, err, now)
	}
	if _, err := e.h.Store.MarkUnknown(e.ctx, cur); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("second MarkUnknown: %v, want ErrFenced", err)
	}
	if got, created, err := e.h.Store.Reserve(e.ctx, c); err != nil || created || registry.Decide(got, false, c.Fingerprint) != registry.Unknown {
		t.Errorf("Reserve of the UNKNOWN scope: state %s created %v err %v, want the UNKNOWN record", got.State, created, err)
	}
	e.setNow(base.Add(48 * time.Hour))
	for _, r := range []registry.Record{u, cur} {
		if _, err := e.h.Store.TakeOver(e.ctx, r, time.Minute); !errors.Is(err, registry.ErrFenced) {
			t.Errorf("TakeOver of an UNKNOWN record (as %s): %v, want ErrFenced", r.State, err)
		}
		if _, err := e.h.Store.Complete(e.ctx, r, effect("unknown", outcome("unknown", 1))); !errors.Is(err, registry.ErrFenced) {
			t.Errorf("Complete of an UNKNOWN record (as %s): %v, want ErrFenced", r.State, err)
		}
		if err := e.h.Store.Release(e.ctx, r); !errors.Is(err, registry.ErrFenced) {
			t.Errorf("Release of an UNKNOWN record: %v, want ErrFenced", err)
		}
		if _, err := e.h.Store.BeginEffect(e.ctx, r, "transfer", nil); !errors.Is(err, registry.ErrFenced) {
			t.Errorf("BeginEffect of an UNKNOWN record: %v, want ErrFenced", err)
		}
	}
	if n := e.effects(rec.OperationID) + e.outbox(rec.OperationID); n != 0 {
		t.Errorf("refused calls on an UNKNOWN record left %d business and outbox rows", n)
	}
	if st, gen := e.state(c.Scope); st != idem.StateUnknown || gen != 2 {
		t.Errorf("after the refused calls: state %s gen %d, want UNKNOWN gen 2", st, gen)
	}
	// Recovery may still learn and record the provider's handle.
	if err := e.h.Store.RecordEffect(e.ctx, u, "transfer", "tr_9", registry.EffectSucceeded, nil); err != nil {
		t.Errorf("RecordEffect of an UNKNOWN record's attempt: %v", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, rec, "transfer", "tr_stale", "", nil); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RecordEffect of an UNKNOWN record by the stale generation: %v, want ErrFenced", err)
	}

	// Recording that an outcome is unknown is never fenced by the epoch.
	old := e.claim("conformance.unknown")
	old.WriterEpoch = 0
	oldRec := e.reserve(old)
	e.beginEffect(oldRec, "transfer")
	e.bump()
	if got, err := e.h.Store.MarkUnknown(e.ctx, oldRec); err != nil || got.State != idem.StateUnknown {
		t.Errorf("MarkUnknown by a fenced writer: state %s err %v, want UNKNOWN", got.State, err)
	}
}

// sameEffect compares every field of two attempts, times with Equal.
func sameEffect(a, b registry.Effect) bool {
	return a.OperationID == b.OperationID && a.Name == b.Name && a.DownstreamKey == b.DownstreamKey &&
		a.OwnerGen == b.OwnerGen && a.Handle == b.Handle && a.Result == b.Result &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}
