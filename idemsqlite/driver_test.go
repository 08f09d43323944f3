package idemsqlite

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// The driver's own tests: the conformance suite (TestConformance) is the
// definition of driver semantics; these pin down SQLite specifics and
// give quick signals when the suite fails.

func newClaim(op string) registry.Claim {
	var c registry.Claim
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rand.Read(c.Owner[:])
	c.Operation = op
	c.WriterEpoch = 3
	return c
}

func succeeded(body string, msgs ...string) registry.Outcome {
	o := registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{
		Status: 201, MediaType: "application/json", Body: []byte(body)}}
	for _, m := range msgs {
		o.Outbox = append(o.Outbox, registry.Message{Topic: "t", Payload: []byte(m)})
	}
	return o
}

func returns(o registry.Outcome) registry.BusinessFunc {
	return func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return o, nil }
}

func TestReserveCreatesOnce(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t)
	ctx := t.Context()
	c := newClaim("once")
	const n = 50
	var wg sync.WaitGroup
	recs := make([]registry.Record, n)
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { recs[i], created[i], errs[i] = s.Reserve(ctx, c) })
	}
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Reserve %d: %v", i, errs[i])
		}
		if created[i] {
			winners++
		}
		if recs[i].OperationID != recs[0].OperationID {
			t.Errorf("Reserve %d saw operation %s, Reserve 0 saw %s", i, recs[i].OperationID, recs[0].OperationID)
		}
	}
	if winners != 1 {
		t.Errorf("%d callers created the record, want 1", winners)
	}
}

func TestReserveCompleteRelease(t *testing.T) {
	t.Parallel()
	s, clock := openTest(t)
	ctx := t.Context()
	base := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	clock.set(base)

	c := newClaim("pay")
	c.Lease = time.Minute
	rec, created, err := s.Reserve(ctx, c)
	if err != nil || !created {
		t.Fatalf("Reserve: created %v err %v", created, err)
	}
	if rec.State != idem.StateReserved || rec.OwnerGen != 1 || rec.WriterEpoch != 3 ||
		rec.Contract != idem.ContractVersion || rec.Operation != "pay" || rec.Owner != c.Owner ||
		!rec.CreatedAt.Equal(base) || !rec.LeaseUntil.Equal(base.Add(time.Minute)) ||
		!rec.ExpiresAt.Equal(base.Add(registry.DefaultRetention)) || rec.CreatedAt.Location() != time.UTC {
		t.Errorf("reserved record %+v", rec)
	}

	// A nil body and a nil payload are stored as empty, not NULL.
	out := succeeded("", "")
	out.Response.Body = nil
	out.Outbox[0].Payload = nil
	clock.set(base.Add(time.Second))
	done, err := s.Complete(ctx, rec, returns(out))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if done.State != idem.StateSucceeded || done.Response == nil || done.Response.Body == nil ||
		len(done.Response.Body) != 0 || !done.UpdatedAt.Equal(base.Add(time.Second)) {
		t.Errorf("completed record %+v, response %+v", done, done.Response)
	}
	got, err := s.GetByID(ctx, rec.OperationID)
	if err != nil || got.Response == nil || got.Response.Status != 201 {
		t.Errorf("GetByID: %+v %v", got, err)
	}
	msgs, err := s.ClaimOutbox(ctx, 10, time.Minute)
	if err != nil || len(msgs) != 1 || msgs[0].ID != rec.OperationID+"/0" || msgs[0].Payload == nil {
		t.Errorf("ClaimOutbox: %+v %v", msgs, err)
	}
	if err := s.Release(ctx, done); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Release of a terminal record: %v, want ErrFenced", err)
	}

	c2 := newClaim("pay")
	rec2, _, err := s.Reserve(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, rec2); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := s.Get(ctx, c2.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("Get after Release: %v, want ErrNotFound", err)
	}
}

func TestTakeOverInjectedTime(t *testing.T) {
	t.Parallel()
	s, clock := openTest(t)
	ctx := t.Context()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock.set(base)
	c := newClaim("recover")
	c.Lease = 10 * time.Second
	rec, _, err := s.Reserve(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	clock.set(base.Add(5 * time.Second))
	if _, err := s.TakeOver(ctx, rec, time.Minute); !errors.Is(err, registry.ErrFenced) {
		t.Fatalf("TakeOver within the lease: %v, want ErrFenced", err)
	}
	clock.set(base.Add(10 * time.Second))
	cur, err := s.TakeOver(ctx, rec, time.Minute)
	if err != nil || cur.OwnerGen != 2 || !cur.LeaseUntil.Equal(base.Add(70*time.Second)) {
		t.Fatalf("TakeOver: %+v %v", cur, err)
	}
	if _, err := s.Complete(ctx, rec, returns(succeeded("{}"))); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("stale Complete: %v, want ErrFenced", err)
	}
	if _, err := s.Complete(ctx, cur, returns(registry.Outcome{State: idem.StateExecuting})); err == nil ||
		errors.Is(err, registry.ErrFenced) {
		t.Errorf("Complete with a non-terminal outcome: %v, want a validation error", err)
	}
	if _, err := s.Complete(ctx, cur, returns(succeeded("{}"))); err != nil {
		t.Errorf("Complete by the new owner: %v", err)
	}
}

func TestDatabaseTime(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t)
	before := time.Now().Add(-time.Second)
	rec, _, err := s.Reserve(t.Context(), newClaim("clock"))
	after := time.Now().Add(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec.CreatedAt.Before(before) || rec.CreatedAt.After(after) || rec.CreatedAt.Location() != time.UTC {
		t.Errorf("created at %v, want database time in UTC between %v and %v", rec.CreatedAt, before, after)
	}
	if d := rec.LeaseUntil.Sub(rec.CreatedAt); d != registry.DefaultLease {
		t.Errorf("lease %v, want %v", d, registry.DefaultLease)
	}
}

func TestClaimAndExecuteWinnerLoser(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t)
	ctx := t.Context()
	c := newClaim("in-tx")
	res, err := inTx(ctx, s, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		if _, ok := tx.Native().(interface{ Commit() error }); !ok {
			t.Errorf("Native() is %T, want *sql.Tx", tx.Native())
		}
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM idem_operations WHERE operation_id = $1`, rec.OperationID).Scan(&n); err != nil || n != 1 {
			t.Errorf("claim not visible in its transaction: %d %v", n, err)
		}
		return succeeded(`{"ok":true}`, "m"), nil
	})
	if err != nil || res.Verdict != registry.Execute || res.Record.State != idem.StateSucceeded {
		t.Fatalf("winner: %+v %v", res, err)
	}
	ran := false
	never := func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		ran = true
		return succeeded("{}"), nil
	}
	if res, err := inTx(ctx, s, c, never); err != nil || res.Verdict != registry.Replay ||
		string(res.Record.Response.Body) != `{"ok":true}` {
		t.Errorf("same fingerprint: %+v %v, want replay", res, err)
	}
	other := c
	other.Fingerprint[0] ^= 1
	if res, err := inTx(ctx, s, other, never); err != nil || res.Verdict != registry.Conflict {
		t.Errorf("other fingerprint: %v %v, want conflict", res.Verdict, err)
	}
	flying := newClaim("in-tx")
	if _, _, err := s.Reserve(ctx, flying); err != nil {
		t.Fatal(err)
	}
	if res, err := inTx(ctx, s, flying, never); err != nil || res.Verdict != registry.InProgress {
		t.Errorf("in-flight scope: %v %v, want in_progress", res.Verdict, err)
	}
	if ran {
		t.Errorf("a losing claim ran the business function")
	}
}

func TestClaimOutboxOrderAndLimit(t *testing.T) {
	t.Parallel()
	s, clock := openTest(t)
	ctx := t.Context()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock.set(base)
	rec, _, err := s.Reserve(ctx, newClaim("outbox"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(ctx, rec, returns(succeeded("{}", "a", "b", "c"))); err != nil {
		t.Fatal(err)
	}
	first, err := s.ClaimOutbox(ctx, 2, time.Minute)
	if err != nil || len(first) != 2 || string(first[0].Payload) != "a" || string(first[1].Payload) != "b" ||
		!first[0].CreatedAt.Equal(base) {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	if none, err := s.ClaimOutbox(ctx, 0, time.Minute); err != nil || len(none) != 0 {
		t.Errorf("limit 0: %+v %v", none, err)
	}
	second, err := s.ClaimOutbox(ctx, 10, time.Minute)
	if err != nil || len(second) != 1 || string(second[0].Payload) != "c" {
		t.Fatalf("second claim: %+v %v", second, err)
	}
	if err := s.MarkPublished(ctx, []string{first[0].ID, second[0].ID, "unknown/0"}); err != nil {
		t.Fatal(err)
	}
	clock.set(base.Add(time.Hour))
	again, err := s.ClaimOutbox(ctx, 10, time.Minute)
	if err != nil || len(again) != 1 || again[0].ID != first[1].ID {
		t.Errorf("after expiry: %+v %v, want only %s", again, err, first[1].ID)
	}
}
