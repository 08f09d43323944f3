package registrytest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// testNonConflictErrorSurfaced: a claim insert that fails for any reason
// but a unique conflict returns that error — never a verdict, never a
// conflict — and leaves no record.
// Proves threat:storage-trouble-fails-open (docs/threat-model.md).
func testNonConflictErrorSurfaced(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	if err := e.h.FailClaims(e.ctx, "conformance.explode"); err != nil {
		t.Fatalf("FailClaims: %v", err)
	}
	c := e.claim("conformance.explode")
	called := false
	res, err := e.h.ClaimAndExecute(e.ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		called = true
		return outcome("explode", 1), nil
	})
	t.Logf("failed claim returned: %v", err)
	switch {
	case err == nil:
		t.Errorf("claim whose insert failed returned no error (verdict %v)", res.Verdict)
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrFenced), errors.Is(err, idem.ErrDigestMismatch):
		t.Errorf("claim whose insert failed returned %v, want the database error", err)
	}
	if res.Verdict != 0 {
		t.Errorf("claim whose insert failed returned verdict %v, want none", res.Verdict)
	}
	if called {
		t.Errorf("business function ran although the claim insert failed")
	}
	if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("Get after the failed claim: %v, want ErrNotFound", err)
	}
	if n := e.count(countAllOutbox); n != 0 {
		t.Errorf("%d outbox rows after the failed claim, want 0", n)
	}
	// Only the named operation fails.
	res, err = e.h.ClaimAndExecute(e.ctx, e.claim("conformance.fine"), effect("fine", outcome("fine", 0)))
	if err != nil || res.Verdict != registry.Execute {
		t.Errorf("claim of another operation: verdict %v err %v, want execute", res.Verdict, err)
	}
}

// testOutboxExactlyWhenCommitted: outbox rows exist exactly for outcomes
// that committed, with stable message IDs.
func testOutboxExactlyWhenCommitted(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	out := outcome("outbox", 2)

	rec := e.reserve(e.claim("conformance.outbox"))
	e.complete(rec, out)
	checkOutboxRows(e, rec.OperationID, 2)

	rec = e.reserve(e.claim("conformance.outbox"))
	fn := func(ctx context.Context, tx registry.Tx, r registry.Record) (registry.Outcome, error) {
		if _, err := failing(errBusiness)(ctx, tx, r); err != nil {
			return out, err // an outcome with messages, and an error: nothing commits
		}
		return out, nil
	}
	if _, err := e.h.Store.Complete(e.ctx, rec, fn); !errors.Is(err, errBusiness) {
		t.Errorf("Complete with a failing business function: %v, want its error", err)
	}
	if n := e.outbox(rec.OperationID); n != 0 {
		t.Errorf("%d outbox rows after a failed business function, want 0", n)
	}
	if n := e.effects(rec.OperationID); n != 0 {
		t.Errorf("%d business rows after a failed business function, want 0", n)
	}
	if got, err := e.h.Store.Get(e.ctx, rec.Scope); err != nil || got.State != idem.StateReserved || got.Response != nil {
		t.Errorf("after a failed Complete: state %s response %v err %v, want RESERVED without response", got.State, got.Response, err)
	}

	c := e.claim("conformance.outbox")
	c.Lease = time.Minute
	old := e.reserve(c)
	e.setNow(base.Add(time.Hour))
	cur, err := e.h.Store.TakeOver(e.ctx, old, time.Minute)
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	if _, err := e.h.Store.Complete(e.ctx, old, effect("stale", out)); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("fenced Complete: %v, want ErrFenced", err)
	}
	if n := e.outbox(old.OperationID); n != 0 {
		t.Errorf("%d outbox rows after a fenced Complete, want 0", n)
	}
	e.complete(cur, out)
	checkOutboxRows(e, cur.OperationID, 2)

	var opID string
	_, err = e.h.ClaimAndExecute(e.ctx, e.claim("conformance.outbox"), func(ctx context.Context, tx registry.Tx, r registry.Record) (registry.Outcome, error) {
		opID = r.OperationID
		return fn(ctx, tx, r)
	})
	if !errors.Is(err, errBusiness) {
		t.Errorf("in-transaction claim with a failing business function: %v, want its error", err)
	}
	if n := e.outbox(opID); n != 0 {
		t.Errorf("%d outbox rows after a rolled-back claim, want 0", n)
	}
	res, err := e.h.ClaimAndExecute(e.ctx, e.claim("conformance.outbox"), effect("in-tx", out))
	if err != nil || res.Verdict != registry.Execute {
		t.Fatalf("in-transaction claim: verdict %v err %v", res.Verdict, err)
	}
	checkOutboxRows(e, res.Record.OperationID, 2)
	if n := e.count(countAllOutbox); n != 6 {
		t.Errorf("%d outbox rows in all, want 6 (three committed outcomes of two messages)", n)
	}
}

// testOutboxRelayClaims: concurrent relays never share a message while its
// claim lasts; published messages are never claimed again; expired claims
// are (at-least-once).
func testOutboxRelayClaims(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	type msg struct {
		opID string
		m    registry.Message
	}
	want := map[string]msg{}
	for range 5 {
		rec := e.reserve(e.claim("conformance.relay"))
		out := outcome(rec.OperationID, 2)
		e.complete(rec, out)
		for i, m := range out.Outbox {
			want[registry.MessageID(rec.OperationID, i)] = msg{rec.OperationID, m}
		}
	}
	check := func(what string, m registry.OutboxMessage) {
		w, ok := want[m.ID]
		switch {
		case !ok:
			t.Errorf("%s: unknown message %q", what, m.ID)
		case m.OperationID != w.opID || m.Topic != w.m.Topic || !bytes.Equal(m.Payload, w.m.Payload):
			t.Errorf("%s: message %s = {%s %s %q}, want {%s %s %q}", what, m.ID, m.OperationID, m.Topic, m.Payload, w.opID, w.m.Topic, w.m.Payload)
		case !m.CreatedAt.Equal(base):
			t.Errorf("%s: message %s created at %v, want %v", what, m.ID, m.CreatedAt, base)
		}
	}
	ascending := func(what string, batch []registry.OutboxMessage) {
		if !slices.IsSortedFunc(batch, func(a, b registry.OutboxMessage) int { return cmp.Compare(a.Seq, b.Seq) }) {
			t.Errorf("%s: batch not in storage order", what)
		}
	}

	const relays, limit = 4, 3
	batches := make([][][]registry.OutboxMessage, relays)
	errs := make([]error, relays)
	race(relays, func(i int) {
		for {
			b, err := e.h.Store.ClaimOutbox(e.ctx, limit, time.Minute)
			if err != nil || len(b) == 0 {
				errs[i] = err
				return
			}
			batches[i] = append(batches[i], b)
		}
	})
	claimedBy := map[string]int{}
	var all []registry.OutboxMessage
	for i := range relays {
		if errs[i] != nil {
			t.Errorf("relay %d: ClaimOutbox: %v", i, errs[i])
		}
		for _, b := range batches[i] {
			if len(b) > limit {
				t.Errorf("relay %d claimed %d messages, limit %d", i, len(b), limit)
			}
			ascending("concurrent claim", b)
			for _, m := range b {
				check("concurrent claim", m)
				if prev, dup := claimedBy[m.ID]; dup {
					t.Errorf("message %s claimed by relays %d and %d while the first claim lasted", m.ID, prev, i)
				}
				claimedBy[m.ID] = i
				all = append(all, m)
			}
		}
	}
	if len(claimedBy) != len(want) {
		t.Errorf("%d distinct messages claimed, want %d", len(claimedBy), len(want))
	}
	if b, err := e.h.Store.ClaimOutbox(e.ctx, 100, time.Minute); err != nil || len(b) != 0 {
		t.Errorf("ClaimOutbox while every claim lasts: %d messages, err %v; want none", len(b), err)
	}

	slices.SortFunc(all, func(a, b registry.OutboxMessage) int { return cmp.Compare(a.Seq, b.Seq) })
	var published, pending []string
	for i, m := range all {
		if i < 6 {
			published = append(published, m.ID)
		} else {
			pending = append(pending, m.ID)
		}
	}
	if err := e.h.Store.MarkPublished(e.ctx, published); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	e.setNow(base.Add(2 * time.Minute)) // every claim has expired
	var got []string
	for _, limit := range []int{2, 100} { // oldest first, then the rest
		b, err := e.h.Store.ClaimOutbox(e.ctx, limit, time.Minute)
		if err != nil {
			t.Fatalf("ClaimOutbox after the claims expired: %v", err)
		}
		ascending("reclaim", b)
		for _, m := range b {
			check("reclaim", m)
			got = append(got, m.ID)
		}
	}
	if !slices.Equal(got, pending) {
		t.Errorf("after expiry reclaimed %v (2 then the rest), want the unpublished %v, oldest first", got, pending)
	}
	if b, err := e.h.Store.ClaimOutbox(e.ctx, 100, time.Minute); err != nil || len(b) != 0 {
		t.Errorf("ClaimOutbox right after the reclaim: %d messages, err %v; want none", len(b), err)
	}
	if err := e.h.Store.MarkPublished(e.ctx, pending); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	e.setNow(base.Add(time.Hour))
	if b, err := e.h.Store.ClaimOutbox(e.ctx, 100, time.Minute); err != nil || len(b) != 0 {
		t.Errorf("ClaimOutbox after everything was published: %d messages, err %v; want none", len(b), err)
	}
}
