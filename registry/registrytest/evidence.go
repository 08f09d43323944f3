package registrytest

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Cases of what settles an effect on evidence (SPEC E1–E2): the request
// an attempt sends is stored before the call and never changes; the
// downstream's answer is stored with the result; a reconciliation stores
// the rendered outcome's outbox messages in its transaction.

// testEffectRequestAnswer: BeginEffect stores the request; a second
// BeginEffect (a takeover, a re-send) keeps the first request whatever it
// passes; RecordEffect stores the answer, and a nil answer keeps it.
func testEffectRequestAnswer(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	rec := e.reserve(e.claim("conformance.request"))
	first := []byte(`{"amount":"1.00","reference":"` + rec.OperationID + `"}`)
	eff, err := e.h.Store.BeginEffect(e.ctx, rec, "transfer", first)
	if err != nil || !bytes.Equal(eff.Request, first) || eff.Answer != nil {
		t.Fatalf("BeginEffect: %+v, %v; want the request stored and no answer", eff, err)
	}
	again, err := e.h.Store.BeginEffect(e.ctx, rec, "transfer", []byte(`{"amount":"9.99"}`))
	if err != nil || !bytes.Equal(again.Request, first) {
		t.Errorf("second BeginEffect: request %q, %v; want the first one kept", again.Request, err)
	}
	cur, err := e.h.Store.Get(e.ctx, rec.Scope)
	if err != nil {
		t.Fatal(err)
	}
	answer := []byte(`{"id":"tr_1","status":"executed"}`)
	if err := e.h.Store.RecordEffect(e.ctx, cur, "transfer", "tr_1", registry.EffectSucceeded, answer); err != nil {
		t.Fatalf("RecordEffect: %v", err)
	}
	if err := e.h.Store.RecordEffect(e.ctx, cur, "transfer", "", "", nil); err != nil {
		t.Fatalf("RecordEffect without an answer: %v", err)
	}
	got := e.effectsOf(rec.OperationID)["transfer"]
	if !bytes.Equal(got.Request, first) || !bytes.Equal(got.Answer, answer) || got.Handle != "tr_1" || got.Result != registry.EffectSucceeded {
		t.Errorf("stored attempt %+v; want request %q, answer %q, handle tr_1, succeeded", got, first, answer)
	}
}

// testReconcileOutbox: Reconcile inserts the outcome's outbox messages
// with their stable IDs in its transaction — none when it is refused —
// and refuses a 5xx response, which is never stored.
func testReconcileOutbox(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	u := e.unknown(e.claim("conformance.reconcile-outbox"))
	r := reconciliation("recovery-outbox")
	r.Outbox = []registry.Message{{Topic: "transfer.created", Payload: []byte(`{"n":0}`)}, {Topic: "transfer.settled", Payload: []byte(`{"n":1}`)}}
	bad := r
	bad.Response.Status = 503
	if _, err := e.h.Store.Reconcile(e.ctx, u.OperationID, bad); err == nil {
		t.Errorf("Reconcile with a 503 response succeeded; a 5xx is never stored")
	}
	if n := e.outbox(u.OperationID); n != 0 {
		t.Errorf("a refused reconciliation wrote %d outbox rows", n)
	}
	done, err := e.h.Store.Reconcile(e.ctx, u.OperationID, r)
	if err != nil || done.State != idem.StateSucceeded {
		t.Fatalf("Reconcile: %+v, %v", done, err)
	}
	if n := e.outbox(u.OperationID); n != 2 {
		t.Errorf("Reconcile wrote %d outbox rows, want 2", n)
	}
	if _, err := e.h.Store.Reconcile(e.ctx, u.OperationID, r); err == nil {
		t.Errorf("second Reconcile succeeded")
	}
	if n := e.outbox(u.OperationID); n != 2 {
		t.Errorf("after a refused second Reconcile: %d outbox rows, want 2", n)
	}
	msgs, err := e.h.Store.ClaimOutbox(e.ctx, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		if m.OperationID == u.OperationID {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) != 2 || ids[0] != registry.MessageID(u.OperationID, 0) || ids[1] != registry.MessageID(u.OperationID, 1) {
		t.Errorf("outbox IDs %v; want %s/0 and %s/1", ids, u.OperationID, u.OperationID)
	}
}

// testListOperationsAfter: ListFilter.After pages through a listing: the
// pages, read one after the other, are the whole listing in its order.
func testListOperationsAfter(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	var want []string
	for i := range 5 {
		e.setNow(base.Add(time.Duration(i%3) * time.Second)) // ties on created_at too
		want = append(want, e.unknown(e.claim("conformance.page")).OperationID)
	}
	// The listing order: created_at, then operation ID.
	order := map[string]int{}
	for i, id := range want {
		order[id] = i % 3
	}
	slices.SortFunc(want, func(a, b string) int {
		if order[a] != order[b] {
			return order[a] - order[b]
		}
		return strings.Compare(a, b)
	})
	e.setNow(base.Add(time.Hour))
	all, err := e.h.Store.ListOperations(e.ctx, registry.ListFilter{State: idem.StateUnknown})
	if err != nil || len(all) != len(want) {
		t.Fatalf("ListOperations: %d records, %v; want %d", len(all), err, len(want))
	}
	for i, r := range all {
		if r.OperationID != want[i] {
			t.Fatalf("ListOperations order %d: %s, want %s (created_at, then operation ID)", i, r.OperationID, want[i])
		}
	}
	for _, state := range []idem.State{idem.StateUnknown, ""} {
		var paged []string
		f := registry.ListFilter{State: state, Limit: 2}
		for range 10 {
			page, err := e.h.Store.ListOperations(e.ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page {
				paged = append(paged, r.OperationID)
			}
			if len(page) < f.Limit {
				break
			}
			f.After = page[len(page)-1]
		}
		var full []string
		for _, r := range all {
			full = append(full, r.OperationID)
		}
		if !slices.Equal(paged, full) {
			t.Errorf("state %q: pages %v; want the listing %v", state, paged, full)
		}
	}
}
