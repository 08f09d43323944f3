package registrytest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of the control row (SPEC E6): the writer epoch that fences older
// writers, and the drain flag.

const countRecords = `SELECT count(*) FROM idem_operations`

// control reads the control row and fails the test on error.
func (e *env) control() registry.Control {
	e.t.Helper()
	c, err := e.h.Store.Control(e.ctx)
	if err != nil {
		e.t.Fatalf("Control: %v", err)
	}
	return c
}

// bump raises the writer epoch once and returns the new value.
func (e *env) bump() int64 {
	e.t.Helper()
	n, err := e.h.Store.BumpEpoch(e.ctx)
	if err != nil {
		e.t.Fatalf("BumpEpoch: %v", err)
	}
	return n
}

// testControlRowInitial: a fresh registry has the control row (epoch 0,
// not draining); bumps stamp it with the store's "now"; the database
// refuses to lower the epoch or remove the row.
func testControlRowInitial(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.control()
	if c.WriterEpoch != 0 || c.Draining || c.UpdatedAt.IsZero() {
		t.Errorf("initial control row %+v, want epoch 0, not draining, a timestamp", c)
	}
	e.setNow(base)
	if n := e.bump(); n != 1 {
		t.Errorf("first BumpEpoch returned %d, want 1", n)
	}
	if c = e.control(); c.WriterEpoch != 1 || c.Draining || !c.UpdatedAt.Equal(base) {
		t.Errorf("after a bump at %v: %+v, want epoch 1 updated at %[1]v", base, c)
	}
	e.setNow(base.Add(1e9))
	if n := e.bump(); n != 2 {
		t.Errorf("second BumpEpoch returned %d, want 2", n)
	}
	for _, q := range []string{
		`UPDATE idem_control SET writer_epoch = 1 WHERE id = 1`,
		`UPDATE idem_control SET id = 2`,
		`DELETE FROM idem_control`,
	} {
		if err := e.h.Exec(e.ctx, q); err == nil {
			t.Errorf("the database accepted %q", q)
		}
	}
	if got := e.control(); got.WriterEpoch != 2 || !got.UpdatedAt.Equal(base.Add(1e9)) {
		t.Errorf("control row after refused changes: %+v, want epoch 2", got)
	}
}

// testBumpEpochAtomic: concurrent bumps each raise the epoch by one and
// return distinct values; none is lost.
func testBumpEpochAtomic(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const bumps = 10
	initial := e.control().WriterEpoch
	got := make([]int64, bumps)
	errs := make([]error, bumps)
	race(bumps, func(i int) { got[i], errs[i] = e.h.Store.BumpEpoch(e.ctx) })
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent BumpEpoch: %v", err)
	}
	slices.Sort(got)
	for i, n := range got {
		if n != initial+int64(i)+1 {
			t.Fatalf("concurrent bumps from %d returned %v, want %d…%d each once", initial, got, initial+1, initial+bumps)
		}
	}
	if c := e.control(); c.WriterEpoch != initial+bumps {
		t.Errorf("epoch after %d bumps from %d: %d", bumps, initial, c.WriterEpoch)
	}
}

// testReserveFencedByEpoch: a writer older than the registry's epoch
// cannot reserve a new scope (nothing written, with or without an active
// limit), but still gets the record of an existing scope, finished or in
// flight; writers at or above the epoch reserve as before.
// Proves threat:rolled-back-writer (docs/threat-model.md).
func testReserveFencedByEpoch(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	done := e.claim("conformance.epoch")
	done.WriterEpoch = 0
	finished := e.complete(e.reserve(done), outcome("epoch", 1))
	pending := e.claim("conformance.epoch")
	pending.WriterEpoch = 0
	inflight := e.reserve(pending)
	epoch := e.bump()

	records := e.count(countRecords)
	for _, limit := range []int{0, 1000} {
		c := e.claim("conformance.epoch")
		c.WriterEpoch, c.MaxActive = epoch-1, limit
		rec, created, err := e.h.Store.Reserve(e.ctx, c)
		if !errors.Is(err, registry.ErrWriterFenced) || created || rec.OperationID != "" {
			t.Errorf("Reserve of a new scope at epoch %d < %d (MaxActive %d): created=%v id=%q err=%v, want ErrWriterFenced",
				c.WriterEpoch, epoch, limit, created, rec.OperationID, err)
		}
		if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("Get after a fenced Reserve: %v, want ErrNotFound", err)
		}
	}
	if n := e.count(countRecords); n != records {
		t.Errorf("fenced reservations wrote records: %d, want %d", n, records)
	}

	for _, c := range []struct {
		claim registry.Claim
		want  registry.Record
	}{{done, finished}, {pending, inflight}} {
		c.claim.MaxActive = 1000
		rec, created, err := e.h.Store.Reserve(e.ctx, c.claim)
		if err != nil || created || rec.OperationID != c.want.OperationID || rec.State != c.want.State {
			t.Errorf("Reserve of an existing %s scope by an old writer: id %q state %s created=%v err=%v; want %s, not created",
				c.want.State, rec.OperationID, rec.State, created, err, c.want.OperationID)
		}
		if c.want.Response != nil && !sameResponse(rec.Response, *c.want.Response) {
			t.Errorf("an old writer's replay lost the response: %+v", rec.Response)
		}
	}

	for _, w := range []int64{epoch, epoch + 5} {
		c := e.claim("conformance.epoch")
		c.WriterEpoch = w
		if rec := e.reserve(c); rec.WriterEpoch != w {
			t.Errorf("record reserved at epoch %d stores epoch %d", w, rec.WriterEpoch)
		}
	}
}

// testCompleteFencedByEpoch: a record reserved before a bump cannot be
// completed at its old epoch — nothing commits, business rows and outbox
// included, and the record stays in flight — while the same owner
// generation completes it under the current epoch.
// Proves threat:rolled-back-writer (docs/threat-model.md).
func testCompleteFencedByEpoch(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.epoch")
	c.WriterEpoch = e.control().WriterEpoch
	rec := e.reserve(c)
	epoch := e.bump()
	_, err := e.h.Store.Complete(e.ctx, rec, effect("fenced", outcome("fenced", 2)))
	if !errors.Is(err, registry.ErrWriterFenced) {
		t.Fatalf("Complete at epoch %d after a bump to %d: %v, want ErrWriterFenced", rec.WriterEpoch, epoch, err)
	}
	if n := e.effects(rec.OperationID); n != 0 {
		t.Errorf("the fenced writer's business rows survived: %d", n)
	}
	if n := e.outbox(rec.OperationID); n != 0 {
		t.Errorf("the fenced writer's outbox rows survived: %d", n)
	}
	got, err := e.h.Store.Get(e.ctx, c.Scope)
	if err != nil || got.State != idem.StateReserved || got.OwnerGen != rec.OwnerGen || got.Response != nil {
		t.Errorf("record after the fenced Complete: %+v, %v; want it RESERVED at gen %d", got, err, rec.OwnerGen)
	}

	current := rec
	current.WriterEpoch = epoch
	done, err := e.h.Store.Complete(e.ctx, current, effect("current", outcome("current", 1)))
	if err != nil || done.State != idem.StateSucceeded {
		t.Fatalf("Complete of the same generation at the current epoch: %+v, %v", done, err)
	}
	if n := e.effects(rec.OperationID); n != 1 {
		t.Errorf("%d business rows after the completion at the current epoch, want 1", n)
	}
	if _, err := e.h.Store.Complete(e.ctx, rec, effect("late", outcome("late", 0))); !errors.Is(err, registry.ErrWriterFenced) && !errors.Is(err, registry.ErrFenced) {
		t.Errorf("late Complete of a finished record by the old writer: %v, want a fence error", err)
	}
}

// testClaimFencedByEpoch: the in-transaction style is fenced like Reserve:
// an old writer's claim on a new scope runs nothing and leaves nothing,
// with ErrWriterFenced; on a finished scope it gets the replay.
func testClaimFencedByEpoch(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	epoch := e.bump()
	first := e.claim("conformance.epoch")
	first.WriterEpoch = epoch
	res, err := e.h.ClaimAndExecute(e.ctx, first, effect("current", outcome("current", 1)))
	if err != nil || res.Verdict != registry.Execute {
		t.Fatalf("ClaimAndExecute at the current epoch: verdict %v err %v", res.Verdict, err)
	}
	records := e.count(countRecords)
	ran := false
	never := func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		ran = true
		return outcome("never", 1), nil
	}
	for _, limit := range []int{0, 1000} {
		c := e.claim("conformance.epoch")
		c.WriterEpoch, c.MaxActive = epoch-1, limit
		res, err := e.h.ClaimAndExecute(e.ctx, c, never)
		if !errors.Is(err, registry.ErrWriterFenced) || res.Verdict != 0 {
			t.Errorf("ClaimAndExecute of a new scope at an old epoch (MaxActive %d): verdict %v err %v, want ErrWriterFenced",
				limit, res.Verdict, err)
		}
	}
	if ran {
		t.Errorf("a fenced claim ran its business function")
	}
	if n := e.count(countRecords); n != records {
		t.Errorf("fenced claims wrote records: %d, want %d", n, records)
	}
	if n := e.count(countAllEffects); n != 1 {
		t.Errorf("%d business rows, want the one of the first claim", n)
	}
	old := first
	old.WriterEpoch = epoch - 1
	res, err = e.h.ClaimAndExecute(e.ctx, old, never)
	if err != nil || res.Verdict != registry.Replay || res.Record.OperationID == "" {
		t.Errorf("ClaimAndExecute of a finished scope by an old writer: verdict %v err %v, want replay", res.Verdict, err)
	}
}

// testDrainingRoundTrip: the drain flag is stored and read back, setting
// it twice is harmless, and it never touches the epoch.
func testDrainingRoundTrip(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	epoch := e.bump()
	e.setNow(base)
	for _, on := range []bool{true, true, false, false, true} {
		if err := e.h.Store.SetDraining(e.ctx, on); err != nil {
			t.Fatalf("SetDraining(%v): %v", on, err)
		}
		if c := e.control(); c.Draining != on || c.WriterEpoch != epoch || !c.UpdatedAt.Equal(base) {
			t.Errorf("after SetDraining(%v): %+v, want draining %v, epoch %d, updated at %v", on, c, on, epoch, base)
		}
	}
	if n := e.bump(); n != epoch+1 || !e.control().Draining {
		t.Errorf("a bump while draining: epoch %d, draining %v; want %d, still draining", n, e.control().Draining, epoch+1)
	}
}
