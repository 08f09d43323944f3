package registrytest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of effects in the one-transaction style (registry/effects.go):
// ReserveEffect inserts the record in EXECUTING and its first attempt in
// one transaction, or writes nothing; CompleteEffects stores the answers
// and the outcome in one transaction, or neither.

const countAllAttempts = `SELECT count(*) FROM idem_effects`

// reserveEffect reserves c with its first effect "transfer" and fails the
// test unless it executes.
func (e *env) reserveEffect(c registry.Claim, request []byte) (registry.Record, registry.Effect) {
	e.t.Helper()
	res, eff, err := e.h.Store.ReserveEffect(e.ctx, c, "transfer", request)
	if err != nil || res.Verdict != registry.Execute {
		e.t.Fatalf("ReserveEffect: verdict %v err %v, want execute", res.Verdict, err)
	}
	return res.Record, eff
}

// testEffectReserveAtomic: ReserveEffect inserts the record directly in
// EXECUTING — generation 1, the caller's operation ID, its lease — and the
// attempt with its downstream key and request, both visible to fresh
// reads. A scope that has a record gets its verdict and nothing is
// written: no attempt for the loser's operation ID, the winner's attempt
// untouched. An old writer epoch and the active limit write nothing
// either.
func testEffectReserveAtomic(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.effect-reserve")
	c.Lease = time.Minute
	c.OperationID = idem.NewOperationID(base, c.Scope)
	rec, eff := e.reserveEffect(c, []byte(`{"amount":"1.00"}`))
	if rec.OperationID != c.OperationID || rec.State != idem.StateExecuting || rec.OwnerGen != 1 ||
		!rec.LeaseUntil.Equal(base.Add(time.Minute)) || rec.WriterEpoch != c.WriterEpoch {
		t.Errorf("ReserveEffect record: %+v, want %s EXECUTING gen 1 lease until %v", rec, c.OperationID, base.Add(time.Minute))
	}
	want := registry.Effect{OperationID: c.OperationID, Name: "transfer",
		DownstreamKey: registry.DownstreamKey(c.OperationID, "transfer"), OwnerGen: 1, CreatedAt: base, UpdatedAt: base}
	if !sameEffect(eff, want) || string(eff.Request) != `{"amount":"1.00"}` {
		t.Errorf("ReserveEffect attempt: %+v, want %+v with the request", eff, want)
	}
	if got, err := e.h.Store.Get(e.ctx, c.Scope); err != nil || got.State != idem.StateExecuting || got.OperationID != c.OperationID {
		t.Errorf("Get after ReserveEffect: %+v, %v", got, err)
	}
	if got := e.effectsOf(c.OperationID)["transfer"]; !sameEffect(got, eff) || string(got.Request) != `{"amount":"1.00"}` {
		t.Errorf("Effects after ReserveEffect: %+v, want %+v", got, eff)
	}

	// The scope has a record: a verdict, nothing written.
	for _, tc := range []struct {
		name string
		fp   idem.Fingerprint
		want registry.Verdict
	}{{"same fingerprint", c.Fingerprint, registry.InProgress}, {"other fingerprint", e.fingerprint(), registry.Conflict}} {
		dup := c
		dup.Fingerprint, dup.OperationID = tc.fp, idem.NewOperationID(base, dup.Scope)
		res, got, err := e.h.Store.ReserveEffect(e.ctx, dup, "transfer", []byte(`{"amount":"9.00"}`))
		if err != nil || res.Verdict != tc.want || res.Record.OperationID != c.OperationID || got.OperationID != "" {
			t.Errorf("ReserveEffect, %s: verdict %v record %s effect %+v err %v; want %v on %s and no effect",
				tc.name, res.Verdict, res.Record.OperationID, got, err, tc.want, c.OperationID)
		}
		if n := e.count(countAttempts, dup.OperationID); n != 0 {
			t.Errorf("ReserveEffect, %s: the loser wrote %d attempts", tc.name, n)
		}
	}
	if got := e.effectsOf(c.OperationID)["transfer"]; string(got.Request) != `{"amount":"1.00"}` || got.OwnerGen != 1 {
		t.Errorf("the winner's attempt changed: %+v", got)
	}
	// A settled scope replays.
	if _, err := e.h.Store.CompleteEffects(e.ctx, rec, []registry.EffectAnswer{{Name: "transfer", Result: registry.EffectSucceeded}}, outcome("reserve", 0)); err != nil {
		t.Fatalf("CompleteEffects: %v", err)
	}
	if res, _, err := e.h.Store.ReserveEffect(e.ctx, c, "transfer", nil); err != nil || res.Verdict != registry.Replay {
		t.Errorf("ReserveEffect on a settled scope: verdict %v err %v, want replay", res.Verdict, err)
	}

	// The writer fence: nothing for a new scope.
	fenced := e.claim("conformance.effect-reserve")
	fenced.WriterEpoch = e.control().WriterEpoch
	fenced.OperationID = idem.NewOperationID(base, fenced.Scope)
	e.bump()
	if _, _, err := e.h.Store.ReserveEffect(e.ctx, fenced, "transfer", nil); !errors.Is(err, registry.ErrWriterFenced) {
		t.Errorf("ReserveEffect by an old writer: %v, want ErrWriterFenced", err)
	}
	if _, err := e.h.Store.Get(e.ctx, fenced.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("the fenced writer's record: %v, want ErrNotFound", err)
	}
	if n := e.count(countAttempts, fenced.OperationID); n != 0 {
		t.Errorf("the fenced writer wrote %d attempts", n)
	}

	// The active limit: an owner holding one in-flight transfer gets no
	// second with MaxActive 1.
	limited := e.claim("conformance.effect-limit")
	limited.WriterEpoch = e.control().WriterEpoch
	limited.MaxActive = 1
	e.reserveEffect(limited, nil)
	second := limited
	second.Scope = idem.ScopeHash(e.bytes32())
	second.OperationID = idem.NewOperationID(base, second.Scope)
	if _, _, err := e.h.Store.ReserveEffect(e.ctx, second, "transfer", nil); !errors.Is(err, registry.ErrActiveLimit) {
		t.Errorf("ReserveEffect over the active limit: %v, want ErrActiveLimit", err)
	}
	if n := e.count(countAttempts, second.OperationID); n != 0 {
		t.Errorf("ReserveEffect over the active limit wrote %d attempts", n)
	}
}

// testEffectReserveRace: racing ReserveEffect calls for one scope, each
// with its own operation ID, accept exactly one; every other gets the
// winner's record as in progress, and exactly one attempt exists in all —
// a loser wrote nothing, so it has no key it could send.
// threat:effect-lost-race-sends-nothing
func testEffectReserveRace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.effect-race")
	type outcome struct {
		res registry.Result
		eff registry.Effect
		err error
	}
	hist := make([]outcome, racers)
	claims := make([]registry.Claim, racers)
	for i := range claims {
		claims[i] = c
		claims[i].OperationID = idem.NewOperationID(time.Now(), c.Scope)
	}
	race(racers, func(i int) {
		res, eff, err := e.h.Store.ReserveEffect(e.ctx, claims[i], "transfer", []byte{byte(i)})
		hist[i] = outcome{res, eff, err}
	})
	var winner = -1
	for i, h := range hist {
		switch {
		case h.err != nil:
			t.Errorf("racer %d: %v", i, h.err)
		case h.res.Verdict == registry.Execute:
			if winner >= 0 {
				t.Errorf("racers %d and %d both executed", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no racer executed")
	}
	win := hist[winner]
	for i, h := range hist {
		if i == winner || h.err != nil {
			continue
		}
		if h.res.Verdict != registry.InProgress || h.res.Record.OperationID != win.res.Record.OperationID || h.eff.OperationID != "" {
			t.Errorf("racer %d: verdict %v on %s, effect %+v; want in progress on the winner's %s, no effect",
				i, h.res.Verdict, h.res.Record.OperationID, h.eff, win.res.Record.OperationID)
		}
	}
	if n := e.count(countAllAttempts); n != 1 {
		t.Errorf("%d attempts in all, want the winner's one", n)
	}
	if got := e.effectsOf(win.res.Record.OperationID)["transfer"]; !bytes.Equal(got.Request, []byte{byte(winner)}) {
		t.Errorf("the stored request is %v, want the winner's %v", got.Request, []byte{byte(winner)})
	}
}

// testCompleteEffectsAtomic: CompleteEffects stores the answer and the
// outcome with its outbox rows in one transaction; fenced by the owner
// generation (a takeover), by the writer epoch, or naming no stored
// attempt, or with an outcome that cannot be stored, it writes neither.
// threat:effect-answer-async-loss
func testCompleteEffectsAtomic(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	c := e.claim("conformance.effect-complete")
	c.Lease = time.Minute
	c.WriterEpoch = e.control().WriterEpoch
	rec, _ := e.reserveEffect(c, []byte(`{"amount":"2.00"}`))
	answer := registry.EffectAnswer{Name: "transfer", Handle: "tr_1", Result: registry.EffectSucceeded, Answer: []byte(`{"id":"tr_1"}`)}
	unsettled := func(why string) {
		t.Helper()
		got := e.effectsOf(rec.OperationID)["transfer"]
		if got.Result != "" || got.Handle != "" || got.Answer != nil {
			t.Errorf("%s: the answer was stored: %+v", why, got)
		}
		if n := e.outbox(rec.OperationID); n != 0 {
			t.Errorf("%s: %d outbox rows", why, n)
		}
		if cur, err := e.h.Store.Get(e.ctx, c.Scope); err != nil || cur.State != idem.StateExecuting {
			t.Errorf("%s: record %+v, %v; want it EXECUTING", why, cur, err)
		}
	}

	// An answer for no stored attempt, and an outcome that is not
	// terminal: neither is written.
	if _, err := e.h.Store.CompleteEffects(e.ctx, rec, []registry.EffectAnswer{answer, {Name: "nope", Result: registry.EffectSucceeded}}, outcome("complete", 2)); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("CompleteEffects with an answer for no attempt: %v, want ErrFenced", err)
	}
	unsettled("answer for no attempt")
	bad := outcome("complete", 2)
	bad.State = idem.StateExecuting
	if _, err := e.h.Store.CompleteEffects(e.ctx, rec, []registry.EffectAnswer{answer}, bad); err == nil {
		t.Errorf("CompleteEffects with a non-terminal outcome: nil error")
	}
	unsettled("non-terminal outcome")

	// The writer fence.
	epoch := e.bump()
	if _, err := e.h.Store.CompleteEffects(e.ctx, rec, []registry.EffectAnswer{answer}, outcome("complete", 2)); !errors.Is(err, registry.ErrWriterFenced) {
		t.Errorf("CompleteEffects by an old writer: %v, want ErrWriterFenced", err)
	}
	unsettled("old writer")
	rec.WriterEpoch = epoch

	// A takeover fences the old generation.
	e.setNow(base.Add(time.Hour))
	cur, err := e.h.Store.TakeOver(e.ctx, rec, time.Minute)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	cur.WriterEpoch = epoch
	if _, err := e.h.Store.CompleteEffects(e.ctx, rec, []registry.EffectAnswer{answer}, outcome("complete", 2)); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("CompleteEffects by the stale generation: %v, want ErrFenced", err)
	}
	unsettled("stale generation")

	// The current generation stores both.
	done, err := e.h.Store.CompleteEffects(e.ctx, cur, []registry.EffectAnswer{answer}, outcome("complete", 2))
	if err != nil || done.State != idem.StateSucceeded || done.Response == nil || done.Response.Status != 201 {
		t.Fatalf("CompleteEffects: %+v, %v; want SUCCEEDED 201", done, err)
	}
	got := e.effectsOf(rec.OperationID)["transfer"]
	if got.Handle != "tr_1" || got.Result != registry.EffectSucceeded || string(got.Answer) != `{"id":"tr_1"}` || got.OwnerGen != 2 {
		t.Errorf("the stored attempt: %+v, want the answer at gen 2", got)
	}
	if n := e.outbox(rec.OperationID); n != 2 {
		t.Errorf("%d outbox rows, want 2", n)
	}
	if _, err := e.h.Store.CompleteEffects(e.ctx, cur, []registry.EffectAnswer{answer}, outcome("again", 0)); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("a second CompleteEffects: %v, want ErrFenced", err)
	}
}
