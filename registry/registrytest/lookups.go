package registrytest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// Cases of what an operator's decision is checked against (issue 22):
// recorded lookups and settlements waiting for a second operator.

const countLookups = `SELECT count(*) FROM idem_effect_lookups WHERE operation_id = $1`

// testLookupLog: RecordLookup numbers and dates lookups (by the store's
// clock) and keeps every field; Lookups lists an operation's, oldest
// first; an invalid lookup is refused with nothing written; the database
// refuses to change, delete or truncate the lookups of a live operation,
// and prune deletes them with the operation's tombstone.
//
// threat:operator-contradicts-lookup
func testLookupLog(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	rec := e.reserve(e.expiring("conformance.lookup", time.Minute))
	other := e.reserve(e.claim("conformance.lookup"))
	var want []registry.Lookup
	for i, in := range []registry.Lookup{
		{OperationID: rec.OperationID, Effect: "transfer", DownstreamKey: "idem-k1", Answer: registry.LookupNoAnswer, Detail: "GET answered 503", Actor: "recovery"},
		{OperationID: other.OperationID, Effect: "transfer", DownstreamKey: "idem-k2", Answer: registry.LookupNotFound, Actor: "alice"},
		{OperationID: rec.OperationID, Effect: "transfer", DownstreamKey: "idem-k1", Answer: registry.LookupExecuted, Handle: "tr_2", Detail: "«executed»", Actor: "alice"},
		{OperationID: rec.OperationID, Effect: "refund", DownstreamKey: "idem-k3", Answer: registry.LookupVoided, Actor: "client retry"},
		{OperationID: rec.OperationID, Effect: "transfer", DownstreamKey: "idem-k1", Answer: registry.LookupDeclined, Actor: "bob"},
	} {
		e.setNow(base.Add(time.Duration(i) * time.Second))
		got, err := e.h.Store.RecordLookup(e.ctx, in)
		if err != nil {
			t.Fatalf("RecordLookup %d: %v", i, err)
		}
		if !got.At.Equal(base.Add(time.Duration(i)*time.Second)) || got.Seq <= 0 {
			t.Errorf("RecordLookup %d: at %v seq %d, want the store's now and a positive Seq", i, got.At, got.Seq)
		}
		in.Seq, in.At = got.Seq, got.At
		if got != in {
			t.Errorf("RecordLookup %d returned %+v, want %+v", i, got, in)
		}
		if in.OperationID == rec.OperationID {
			want = append(want, in)
		}
	}
	check := func(what string, want []registry.Lookup) {
		t.Helper()
		got, err := e.h.Store.Lookups(e.ctx, rec.OperationID)
		if err != nil || len(got) != len(want) {
			t.Fatalf("Lookups %s: %+v, %v; want %d", what, got, err, len(want))
		}
		for i := range got {
			if got[i] != want[i] || !got[i].At.Equal(want[i].At) {
				t.Errorf("Lookups %s [%d]: %+v, want %+v", what, i, got[i], want[i])
			}
		}
	}
	check("recorded", want)
	if got, err := e.h.Store.Lookups(e.ctx, "op_none"); err != nil || len(got) != 0 {
		t.Errorf("Lookups of an operation never asked about: %+v, %v; want none", got, err)
	}
	for _, bad := range []registry.Lookup{
		{Effect: "transfer", DownstreamKey: "k", Answer: registry.LookupExecuted, Actor: "a"},
		{OperationID: rec.OperationID, DownstreamKey: "k", Answer: registry.LookupExecuted, Actor: "a"},
		{OperationID: rec.OperationID, Effect: "transfer", Answer: registry.LookupExecuted, Actor: "a"},
		{OperationID: rec.OperationID, Effect: "transfer", DownstreamKey: "k", Answer: registry.LookupExecuted},
		{OperationID: rec.OperationID, Effect: "transfer", DownstreamKey: "k", Answer: "maybe", Actor: "a"},
		{OperationID: rec.OperationID, Effect: "transfer", DownstreamKey: "k", Answer: registry.LookupExecuted, Actor: "a", Detail: "nul\x00"},
	} {
		if _, err := e.h.Store.RecordLookup(e.ctx, bad); err == nil {
			t.Errorf("RecordLookup(%+v) accepted an invalid lookup", bad)
		}
	}
	for _, sql := range []string{
		`UPDATE idem_effect_lookups SET answer = 'declined'`,
		`DELETE FROM idem_effect_lookups`,
		`TRUNCATE idem_effect_lookups`, // (SQLite has no TRUNCATE: refused as unknown)
	} {
		if err := e.h.Exec(e.ctx, sql); err == nil {
			t.Errorf("%s succeeded, want the database to refuse it", sql)
		}
	}
	check("after the refused changes", want)

	// Prune deletes them with the tombstone, and only then.
	rec.State = "EXECUTING"
	if _, err := e.h.Store.BeginEffect(e.ctx, rec, "transfer", nil); err != nil {
		t.Fatal(err)
	}
	e.complete(rec, outcome("lookup", 0))
	retired := base.Add(2 * retentionPeriod)
	e.setNow(retired)
	e.wantPrune(10, 1, 0)
	if n := e.count(countLookups, rec.OperationID); n != int64(len(want)) {
		t.Errorf("after retirement %d lookups, want all %d kept", n, len(want))
	}
	e.setNow(retired.Add(time.Minute))
	e.wantPrune(10, 0, 1)
	if n := e.count(countLookups, rec.OperationID); n != 0 {
		t.Errorf("after the tombstone's deletion %d lookups, want none", n)
	}
	if n := e.count(countLookups, other.OperationID); n != 1 {
		t.Errorf("another operation's lookups: %d, want 1 kept", n)
	}
}

// testPendingSettlement: one request per operation (a second is returned
// unchanged, not stored); only someone other than the requester approves
// it, once; the database refuses any other change; of concurrent
// approvals exactly one succeeds.
//
// threat:one-operator-failed
func testPendingSettlement(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	rec := e.reserve(e.claim("conformance.pending"))
	if _, err := e.h.Store.PendingSettlement(e.ctx, rec.OperationID); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("PendingSettlement before a request: %v, want ErrNotFound", err)
	}
	if _, err := e.h.Store.ApproveSettlement(e.ctx, rec.OperationID, "bob"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("ApproveSettlement before a request: %v, want ErrNotFound", err)
	}
	in := registry.PendingSettlement{OperationID: rec.OperationID, Outcome: registry.EffectFailed, Evidence: "OPS-1: no transfer", RequestedBy: "alice"}
	p, created, err := e.h.Store.RequestSettlement(e.ctx, in)
	want := in
	want.RequestedAt = base
	if err != nil || !created || p != want {
		t.Fatalf("RequestSettlement: %+v, %v, %v; want %+v created", p, created, err, want)
	}
	e.setNow(base.Add(time.Second))
	second := registry.PendingSettlement{OperationID: rec.OperationID, Outcome: registry.EffectSucceeded, Handle: "tr_1", Evidence: "OPS-2", RequestedBy: "bob"}
	if p, created, err := e.h.Store.RequestSettlement(e.ctx, second); err != nil || created || p != want {
		t.Errorf("second RequestSettlement: %+v, %v, %v; want the first returned, not created", p, created, err)
	}
	for _, bad := range []registry.PendingSettlement{
		{OperationID: "op_x", Outcome: "maybe", Evidence: "e", RequestedBy: "a"},
		{OperationID: "op_x", Outcome: registry.EffectFailed, RequestedBy: "a"},
		{OperationID: "op_x", Outcome: registry.EffectFailed, Evidence: "e"},
		{OperationID: "op_x", Outcome: registry.EffectFailed, Evidence: "e", RequestedBy: "a", ApprovedBy: "b"},
	} {
		if _, _, err := e.h.Store.RequestSettlement(e.ctx, bad); err == nil {
			t.Errorf("RequestSettlement(%+v) accepted an invalid request", bad)
		}
	}
	if _, err := e.h.Store.PendingSettlement(e.ctx, "op_x"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("an invalid request was stored: %v", err)
	}
	if _, err := e.h.Store.ApproveSettlement(e.ctx, rec.OperationID, "alice"); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("approval by the requester: %v, want ErrFenced", err)
	}
	for _, sql := range []string{
		`UPDATE idem_pending_settlements SET evidence = 'forged'`,
		`UPDATE idem_pending_settlements SET approved_by = requested_by, approved_at = 1`,
		`DELETE FROM idem_pending_settlements`,
		`TRUNCATE idem_pending_settlements`,
	} {
		if err := e.h.Exec(e.ctx, sql); err == nil {
			t.Errorf("%s succeeded, want the database to refuse it", sql)
		}
	}

	var (
		wg  sync.WaitGroup
		won atomic.Int32
	)
	for i := range 10 {
		wg.Go(func() {
			p, err := e.h.Store.ApproveSettlement(e.ctx, rec.OperationID, fmt.Sprintf("op%d", i))
			switch {
			case err == nil:
				won.Add(1)
				if p.ApprovedBy != fmt.Sprintf("op%d", i) || !p.ApprovedAt.Equal(base.Add(time.Second)) || p.Evidence != in.Evidence {
					t.Errorf("approval %d returned %+v", i, p)
				}
			case !errors.Is(err, registry.ErrFenced):
				t.Errorf("approval %d: %v, want ErrFenced for every loser", i, err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d approvals won, want exactly 1", won.Load())
	}
	got, err := e.h.Store.PendingSettlement(e.ctx, rec.OperationID)
	if err != nil || got.ApprovedBy == "" || got.Evidence != in.Evidence {
		t.Errorf("after the approvals: %+v, %v", got, err)
	}
	if err := e.h.Exec(e.ctx, `UPDATE idem_pending_settlements SET approved_by = 'mallory'`); err == nil {
		t.Error("changing the approver succeeded, want the database to refuse it")
	}
}
