package registrytest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// testConcurrentSameFingerprint: racers Reserve one scope with one
// fingerprint; exactly one creates it and completes it while the others
// see it in flight (InProgress) or terminal (Replay, byte-identical).
// Proves threat:concurrent-duplicates (docs/threat-model.md).
func testConcurrentSameFingerprint(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.same")
	out := outcome("same", 2)

	type obs struct {
		rec      registry.Record
		created  bool
		err      error
		late     bool // started after the winner's Complete returned
		retry    *registry.Record
		retryErr error
	}
	var (
		hist      = make([]obs, racers)
		finished  = make(chan struct{}) // closed once the winner is done (or there is none)
		finish    sync.Once
		winners   atomic.Int64
		reserved  sync.WaitGroup
		won       registry.Record // written by the winner before finished closes
		wonErr    error
		stopWatch = make(chan struct{})
	)
	reserved.Add(racers)
	go func() { // without a winner nobody closes finished: do it here
		reserved.Wait()
		if winners.Load() == 0 {
			finish.Do(func() { close(finished) })
		}
		close(stopWatch)
	}()
	race(racers, func(i int) {
		o := &hist[i]
		o.late = closed(finished)
		o.rec, o.created, o.err = e.h.Store.Reserve(e.ctx, c)
		first := o.err == nil && o.created && winners.Add(1) == 1
		reserved.Done()
		switch {
		case o.err != nil || (o.created && !first): // a second creator is reported below
		case first:
			won, wonErr = e.h.Store.Complete(e.ctx, o.rec, effect("winner", out))
			finish.Do(func() { close(finished) })
		case registry.Decide(o.rec, false, c.Fingerprint) == registry.InProgress:
			select { // a client that saw IN_PROGRESS retries later
			case <-finished:
			case <-e.ctx.Done():
			}
			r, created, err := e.h.Store.Reserve(e.ctx, c)
			o.retry, o.retryErr = &r, err
			if created {
				o.retry = nil // reported below: nothing may create it again
			}
		}
	})
	<-stopWatch

	var winner *obs
	inProgress, replays := 0, 0
	for i := range hist {
		o := &hist[i]
		if o.err != nil {
			t.Errorf("racer %d: Reserve: %v", i, o.err)
			continue
		}
		if o.created {
			if winner != nil {
				t.Fatalf("racers %d and another both created the record", i)
			}
			winner = o
		}
	}
	if winner == nil {
		t.Fatalf("no racer created the record")
	}
	opID := winner.rec.OperationID
	if v := registry.Decide(winner.rec, true, c.Fingerprint); v != registry.Execute {
		t.Errorf("winner's verdict %v, want execute", v)
	}
	if winner.rec.State != idem.StateReserved || winner.rec.OwnerGen != 1 {
		t.Errorf("winner's record: state %s gen %d, want RESERVED gen 1", winner.rec.State, winner.rec.OwnerGen)
	}
	if wonErr != nil {
		t.Fatalf("winner's Complete: %v", wonErr)
	}
	if won.State != idem.StateSucceeded || won.OperationID != opID || !sameResponse(won.Response, out.Response) {
		t.Errorf("completed record: state %s, id %s, response %+v; want SUCCEEDED, %s, %+v",
			won.State, won.OperationID, won.Response, opID, out.Response)
	}
	for i := range hist {
		o := &hist[i]
		if o.err != nil || o.created {
			continue
		}
		if o.rec.OperationID != opID {
			t.Errorf("racer %d saw operation %s, winner created %s", i, o.rec.OperationID, opID)
		}
		switch v := registry.Decide(o.rec, false, c.Fingerprint); v {
		case registry.InProgress:
			inProgress++
			if o.late {
				t.Errorf("racer %d started after Complete returned but saw state %s", i, o.rec.State)
			}
			if o.rec.Response != nil {
				t.Errorf("racer %d: in-flight record carries a response", i)
			}
			switch {
			case o.retryErr != nil:
				t.Errorf("racer %d: Reserve after completion: %v", i, o.retryErr)
			case o.retry == nil:
				t.Errorf("racer %d: Reserve after completion created the record again", i)
			case registry.Decide(*o.retry, false, c.Fingerprint) != registry.Replay ||
				!sameResponse(o.retry.Response, out.Response) || o.retry.OperationID != opID:
				t.Errorf("racer %d: after completion got state %s id %s response %+v, want a replay of %s",
					i, o.retry.State, o.retry.OperationID, o.retry.Response, opID)
			}
		case registry.Replay:
			replays++
			if o.rec.State != idem.StateSucceeded || !sameResponse(o.rec.Response, out.Response) {
				t.Errorf("racer %d: replay state %s response %+v, want SUCCEEDED %+v", i, o.rec.State, o.rec.Response, out.Response)
			}
		default:
			t.Errorf("racer %d: verdict %v on state %s, want in_progress or replay", i, v, o.rec.State)
		}
	}
	t.Logf("%d in progress, %d replays", inProgress, replays)
	if n := e.effects(opID); n != 1 {
		t.Errorf("%d business rows, want exactly 1", n)
	}
	checkOutboxRows(e, opID, len(out.Outbox))
}

// checkOutboxRows checks an operation has exactly n outbox rows, one per
// stable message ID.
func checkOutboxRows(e *env, opID string, n int) {
	e.t.Helper()
	if got := e.outbox(opID); got != int64(n) {
		e.t.Errorf("%d outbox rows for %s, want %d", got, opID, n)
	}
	for i := range n {
		id := registry.MessageID(opID, i)
		if got := e.count(`SELECT count(*) FROM idem_outbox WHERE message_id = $1 AND operation_id = $2`, id, opID); got != 1 {
			e.t.Errorf("%d outbox rows with message ID %s, want 1", got, id)
		}
	}
}

// txObs is one in-transaction claim's result.
type txObs struct {
	res registry.Result
	err error
}

// raceInTx runs ClaimAndExecute for every claim at once, with the effect
// business function, and returns what each got and how often fn ran.
func raceInTx(e *env, claims []registry.Claim, out registry.Outcome) ([]txObs, int64) {
	var calls atomic.Int64
	fn := effect("in-tx", out)
	hist := make([]txObs, len(claims))
	race(len(claims), func(i int) {
		hist[i].res, hist[i].err = e.h.ClaimAndExecute(e.ctx, claims[i],
			func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
				calls.Add(1)
				return fn(ctx, tx, rec)
			})
	})
	return hist, calls.Load()
}

// testConcurrentSameFingerprintInTx: the same race in the in-transaction
// style: exactly one Execute, every other claim Replay (or InProgress).
func testConcurrentSameFingerprintInTx(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.same-tx")
	out := outcome("same-tx", 1)
	claims := make([]registry.Claim, racers)
	for i := range claims {
		claims[i] = c
	}
	hist, calls := raceInTx(e, claims, out)
	var winner *registry.Record
	counts := map[registry.Verdict]int{}
	for i, o := range hist {
		if o.err != nil {
			t.Errorf("claim %d: %v", i, o.err)
			continue
		}
		counts[o.res.Verdict]++
		if o.res.Verdict == registry.Execute {
			if winner != nil {
				t.Fatalf("two claims executed")
			}
			winner = &hist[i].res.Record
		}
	}
	t.Logf("verdicts: %v", counts)
	if winner == nil {
		t.Fatalf("no claim executed")
	}
	if calls != 1 {
		t.Errorf("business function ran %d times, want 1", calls)
	}
	opID := winner.OperationID
	if winner.State != idem.StateSucceeded || winner.OwnerGen != 1 || !sameResponse(winner.Response, out.Response) {
		t.Errorf("executed record: state %s gen %d response %+v, want SUCCEEDED gen 1 %+v",
			winner.State, winner.OwnerGen, winner.Response, out.Response)
	}
	for i, o := range hist {
		if o.err != nil || o.res.Verdict == registry.Execute {
			continue
		}
		r := o.res.Record
		switch {
		case r.OperationID != opID:
			t.Errorf("claim %d saw operation %s, winner executed %s", i, r.OperationID, opID)
		case o.res.Verdict == registry.Replay && !sameResponse(r.Response, out.Response):
			t.Errorf("claim %d: replayed %+v, want %+v", i, r.Response, out.Response)
		case o.res.Verdict != registry.Replay && o.res.Verdict != registry.InProgress:
			t.Errorf("claim %d: verdict %v, want replay or in_progress", i, o.res.Verdict)
		}
	}
	if n := e.effects(opID); n != 1 {
		t.Errorf("%d business rows, want exactly 1", n)
	}
	checkOutboxRows(e, opID, 1)
}

// testReserveReleaseChurn: while one scope is reserved and released over
// and over, Reserve never fails (in particular never reports "not found")
// and no two callers hold the reservation at once.
func testReserveReleaseChurn(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.churn")
	const workers, rounds = 20, 25
	var holders, held atomic.Int64
	errs := make([][]error, workers)
	race(workers, func(i int) {
		for range rounds {
			rec, created, err := e.h.Store.Reserve(e.ctx, c)
			if err != nil {
				errs[i] = append(errs[i], fmt.Errorf("Reserve: %w", err))
				continue
			}
			if !created {
				continue
			}
			held.Add(1)
			// The hold lies within [reserve committed, release committed].
			if n := holders.Add(1); n != 1 {
				errs[i] = append(errs[i], fmt.Errorf("%d callers hold the reservation at once", n))
			}
			holders.Add(-1)
			if err := e.h.Store.Release(e.ctx, rec); err != nil {
				errs[i] = append(errs[i], fmt.Errorf("Release of its own reservation: %w", err))
			}
		}
	})
	for i, es := range errs {
		for _, err := range es {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	t.Logf("%d reservations created and released by %d workers", held.Load(), workers)
	if held.Load() == 0 {
		t.Errorf("no reservation was ever created")
	}
}
