package registrytest

import (
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// Cases of outbox delivery (registry.OutboxDelivery): failed attempts,
// backoff, dead letters and requeue.

// outboxMessages completes n operations of one message each at base and
// returns their message IDs, oldest first.
func (e *env) outboxMessages(n int) []string {
	e.t.Helper()
	e.setNow(base)
	var ids []string
	for range n {
		rec := e.reserve(e.claim("conformance.delivery"))
		e.complete(rec, outcome(rec.OperationID, 1))
		ids = append(ids, registry.MessageID(rec.OperationID, 0))
	}
	return ids
}

// claimIDs claims up to 100 messages for a minute and returns them by ID.
func (e *env) claimIDs() map[string]registry.OutboxMessage {
	e.t.Helper()
	b, err := e.h.Store.ClaimOutbox(e.ctx, 100, time.Minute)
	if err != nil {
		e.t.Fatalf("ClaimOutbox: %v", err)
	}
	got := map[string]registry.OutboxMessage{}
	for _, m := range b {
		got[m.ID] = m
	}
	return got
}

// testOutboxBackoff: a failed attempt counts, keeps its error and holds
// the message back until its backoff has passed, then it is claimed with
// its attempt count; a stale or misdirected failure changes nothing.
func testOutboxBackoff(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	ids := e.outboxMessages(2)
	first := e.claimIDs()
	if len(first) != 2 || first[ids[0]].Attempts != 0 || first[ids[0]].LastError != "" || !first[ids[0]].LastAttemptAt.IsZero() {
		t.Fatalf("first claim %+v, want both messages without attempts", first)
	}
	fail := registry.OutboxFailure{ID: ids[0], Attempts: 0, Error: "503 from receiver", RetryAfter: 10 * time.Second}
	e.setNow(base.Add(time.Second))
	if err := e.h.Store.FailOutbox(e.ctx, fail); err != nil {
		t.Fatalf("FailOutbox: %v", err)
	}
	if err := e.h.Store.FailOutbox(e.ctx, fail); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("FailOutbox again with the same attempt count: %v, want ErrFenced", err)
	}
	if err := e.h.Store.MarkPublished(e.ctx, ids[1:]); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: ids[1], Error: "late"}); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("FailOutbox of a published message: %v, want ErrFenced", err)
	}
	if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: "op_nothing/0", Error: "x"}); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("FailOutbox of an unknown message: %v, want ErrFenced", err)
	}

	// The failure replaced the claim (a minute from base): only the
	// backoff, until base+11s, holds the message back now.
	e.setNow(base.Add(10 * time.Second))
	if got := e.claimIDs(); len(got) != 0 {
		t.Errorf("claimed %v during the backoff, want nothing", slices.Sorted(maps.Keys(got)))
	}
	e.setNow(base.Add(11 * time.Second))
	got := e.claimIDs()
	m, ok := got[ids[0]]
	switch {
	case len(got) != 1 || !ok:
		t.Fatalf("claimed %v once the backoff passed, want only %s", slices.Sorted(maps.Keys(got)), ids[0])
	case m.Attempts != 1 || m.LastError != fail.Error || !m.LastAttemptAt.Equal(base.Add(time.Second)):
		t.Errorf("reclaimed message: attempts %d, last error %q at %v; want 1, %q at %v",
			m.Attempts, m.LastError, m.LastAttemptAt, fail.Error, base.Add(time.Second))
	}
	// The second failure counts from the message's count as claimed.
	if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: ids[0], Attempts: 0, Error: "stale"}); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("FailOutbox with a stale attempt count: %v, want ErrFenced", err)
	}
	if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: ids[0], Attempts: 1, Error: "timeout"}); err != nil {
		t.Fatalf("second FailOutbox: %v", err)
	}
	// No backoff: claimable at once.
	if got := e.claimIDs(); len(got) != 1 || got[ids[0]].Attempts != 2 || got[ids[0]].LastError != "timeout" {
		t.Errorf("after a failure without backoff claimed %+v, want %s with 2 attempts", got, ids[0])
	}
	st, err := e.h.Store.OutboxStats(e.ctx)
	if err != nil || st.Pending != 1 || st.Dead != 0 || !st.OldestPending.Equal(base) {
		t.Errorf("OutboxStats = %+v (err %v), want 1 pending created at %v, 0 dead", st, err, base)
	}
}

// testOutboxDeadLetters: a dead letter is never claimed, is listed and
// counted, and a requeue makes it pending again with no attempts; requeue
// is a compare-and-set too.
func testOutboxDeadLetters(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	ids := e.outboxMessages(3)
	e.claimIDs()
	e.setNow(base.Add(time.Minute))
	for _, id := range ids[:2] {
		if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: id, Error: "gone: " + id, RetryAfter: time.Hour, Dead: true}); err != nil {
			t.Fatalf("FailOutbox dead: %v", err)
		}
	}
	if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: ids[0], Attempts: 1, Error: "again"}); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("FailOutbox of a dead letter: %v, want ErrFenced", err)
	}
	e.setNow(base.Add(1000 * time.Hour))
	if got := e.claimIDs(); len(got) != 1 {
		t.Errorf("claimed %v long after, want only the live %s", slices.Sorted(maps.Keys(got)), ids[2])
	}
	dead, err := e.h.Store.DeadLetters(e.ctx, 100)
	if err != nil || len(dead) != 2 {
		t.Fatalf("DeadLetters: %d (err %v), want 2", len(dead), err)
	}
	for i, m := range dead {
		if m.ID != ids[i] || m.Attempts != 1 || m.LastError != "gone: "+ids[i] ||
			!m.DeadAt.Equal(base.Add(time.Minute)) || !m.LastAttemptAt.Equal(base.Add(time.Minute)) || !m.CreatedAt.Equal(base) || len(m.Payload) == 0 {
			t.Errorf("dead letter %d = %+v, want %s with 1 attempt, its error, dead at %v", i, m, ids[i], base.Add(time.Minute))
		}
	}
	if d, err := e.h.Store.DeadLetters(e.ctx, 1); err != nil || len(d) != 1 || d[0].ID != ids[0] {
		t.Errorf("DeadLetters(1) = %v (err %v), want the oldest", d, err)
	}
	st, err := e.h.Store.OutboxStats(e.ctx)
	if err != nil || st.Pending != 1 || st.Dead != 2 || !st.OldestPending.Equal(base) {
		t.Errorf("OutboxStats = %+v (err %v), want 1 pending, 2 dead", st, err)
	}

	if err := e.h.Store.RequeueOutbox(e.ctx, ids[0]); err != nil {
		t.Fatalf("RequeueOutbox: %v", err)
	}
	if err := e.h.Store.RequeueOutbox(e.ctx, ids[0]); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RequeueOutbox of a pending message: %v, want ErrFenced", err)
	}
	if err := e.h.Store.RequeueOutbox(e.ctx, "op_nothing/0"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("RequeueOutbox of an unknown message: %v, want ErrNotFound", err)
	}
	got := e.claimIDs()
	if m, ok := got[ids[0]]; len(got) != 1 || !ok || m.Attempts != 0 || m.LastError != "gone: "+ids[0] {
		t.Errorf("after requeue claimed %+v, want %s with 0 attempts and its last error", got, ids[0])
	}
	if err := e.h.Store.MarkPublished(e.ctx, []string{ids[0]}); err != nil {
		t.Fatal(err)
	}
	if err := e.h.Store.RequeueOutbox(e.ctx, ids[0]); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("RequeueOutbox of a published message: %v, want ErrFenced", err)
	}
	if d, err := e.h.Store.DeadLetters(e.ctx, 100); err != nil || len(d) != 1 || d[0].ID != ids[1] {
		t.Errorf("DeadLetters after the requeue: %v (err %v), want only %s", d, err, ids[1])
	}
	if d, err := e.h.Store.DeadLetters(e.ctx, 0); err != nil || len(d) != 0 {
		t.Errorf("DeadLetters(0) = %v, %v; want none", d, err)
	}
}

// testOutboxFailureRace: of relays recording a failure for the same
// claimed attempt at once, exactly one counts.
func testOutboxFailureRace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	ids := e.outboxMessages(1)
	e.claimIDs()
	var ok, fenced atomic.Int32
	race(8, func(i int) {
		err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: ids[0], Error: "racer", Dead: i%2 == 0})
		switch {
		case err == nil:
			ok.Add(1)
		case errors.Is(err, registry.ErrFenced):
			fenced.Add(1)
		default:
			t.Errorf("FailOutbox: %v", err)
		}
	})
	if ok.Load() != 1 || fenced.Load() != 7 {
		t.Errorf("%d failures recorded and %d fenced, want 1 and 7", ok.Load(), fenced.Load())
	}
	e.setNow(base.Add(time.Hour))
	got := e.claimIDs()
	dead, err := e.h.Store.DeadLetters(e.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got) + len(dead); n != 1 || (len(got) == 1 && got[ids[0]].Attempts != 1) || (len(dead) == 1 && dead[0].Attempts != 1) {
		t.Errorf("after the race: claimed %v, dead %v; want the message once, with 1 attempt", got, dead)
	}
}
