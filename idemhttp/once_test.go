package idemhttp_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

func oneTransaction(mw *idemhttp.Middleware) { mw.Operation.OneTransaction = true }

func TestOneTransactionExecuteReplayConflict(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixtureWith(t, store, idemhttp.Enforce, oneTransaction)
		first := f.post("k1", `{"a": 1}`)
		op := first.header.Get("Idempotency-Operation")
		if first.status != 201 || op == "" || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: %+v", first)
		}
		rec, err := store.Get(t.Context(), scopeOf(t, "k1"))
		if err != nil || rec.OperationID != op || rec.State != idem.StateSucceeded || rec.OwnerGen != 1 ||
			rec.Response == nil || string(rec.Response.Body) != first.body {
			t.Fatalf("stored record %+v, err %v; want SUCCEEDED %s with the first body", rec, err, op)
		}
		again := f.post("k1", `{ "a" : 1 }`)
		if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Idempotency-Operation") != op || again.header.Get("Location") != first.header.Get("Location") ||
			again.header.Get("Set-Cookie") != "" {
			t.Errorf("replay differs:\n first %+v\n again %+v", first, again)
		}
		conflict := f.post("k1", `{"a": 2}`)
		if conflict.status != 422 || code(conflict) != "PAYLOAD_CONFLICT" || conflict.header.Get("Idempotency-Operation") != "" {
			t.Errorf("conflict: %+v", conflict)
		}
		if f.app.calls.Load() != 1 || f.effects() != 1 {
			t.Errorf("handler ran %d times, %d effects; want 1 and 1", f.app.calls.Load(), f.effects())
		}
		if n := f.observed("idem_reservation_seconds"); n != 3 {
			t.Errorf("%d reservation observations, want 3 (one per request that reached the registry)", n)
		}
	})
}

// A duplicate sent while the first request runs in this process is not
// refused as in progress and does not run the handler: it waits for the
// first execution, then finds its record and replays it. (Duplicates in
// other processes run the handler and lose at the record insert: see
// e2e/fault_onetx_race_test.go.)
func TestOneTransactionConcurrentDuplicate(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixtureWith(t, store, idemhttp.Enforce, oneTransaction)
		var wg sync.WaitGroup
		var first, dup, other result
		wg.Go(func() { first = f.post("dup", `{}`, "X-Test", "block") })
		<-f.app.started
		wg.Go(func() { dup = f.post("dup", `{}`) })
		wg.Go(func() { other = f.post("dup", `{"a": 2}`) })
		waitUntil(t, "two requests waiting for the execution of their key", func() bool {
			return f.counted("idem_joined_total", "operation", "things.create") == 2
		})
		f.app.release <- struct{}{}
		wg.Wait()
		if first.status != 201 || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: %+v", first)
		}
		if dup.status != 201 || dup.body != first.body || dup.header.Get("Idempotent-Replayed") != "true" ||
			first.header.Get("Idempotency-Operation") != dup.header.Get("Idempotency-Operation") {
			t.Errorf("the duplicate is not a replay of the first:\n first %+v\n dup   %+v", first, dup)
		}
		if other.status != 422 || code(other) != "PAYLOAD_CONFLICT" {
			t.Errorf("another payload with the key: %+v", other)
		}
		if n := f.app.calls.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		if n := f.effects(); n != 1 {
			t.Errorf("%d effects committed, want 1", n)
		}
	})
}

// TestLocalWaitCap: a duplicate waits for the execution of its key in
// this handler at most the wait cap, in both styles; then (here at once:
// no waiting) it is refused as in progress, and the handler still ran once.
func TestLocalWaitCap(t *testing.T) {
	for style, shape := range map[string]func(*idemhttp.Middleware){"two-phase": nil, "one-transaction": oneTransaction} {
		t.Run(style, func(t *testing.T) {
			stores(t, func(t *testing.T, store registry.Store) {
				f := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) {
					if shape != nil {
						shape(mw)
					}
					mw.WaitCap = -1
				})
				var wg sync.WaitGroup
				var first result
				wg.Go(func() { first = f.post("capped", `{}`, "X-Test", "block") })
				<-f.app.started
				busy := f.post("capped", `{}`)
				f.app.release <- struct{}{}
				wg.Wait()
				if busy.status != 409 || code(busy) != "IN_PROGRESS" || busy.header.Get("Retry-After") == "" {
					t.Errorf("duplicate past the wait cap: %+v", busy)
				}
				if first.status != 201 || f.app.calls.Load() != 1 || f.effects() != 1 {
					t.Errorf("first %+v; handler ran %d times, %d effects; want 201, 1, 1", first, f.app.calls.Load(), f.effects())
				}
			})
		})
	}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOneTransactionWriterFenced(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixtureWith(t, store, idemhttp.Enforce, oneTransaction)
		if _, err := store.BumpEpoch(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := store.BumpEpoch(t.Context()); err != nil {
			t.Fatal(err)
		}
		r := f.post("fenced", `{}`)
		if r.status != http.StatusServiceUnavailable || code(r) != string(idem.CodeWriterFenced) {
			t.Errorf("fenced writer: %+v", r)
		}
		if n := f.effects(); n != 0 {
			t.Errorf("%d effects committed by a fenced writer", n)
		}
		if _, err := store.Get(t.Context(), scopeOf(t, "fenced")); err == nil {
			t.Errorf("a fenced writer stored a record")
		}
	})
}

// observed returns the number of observations of a histogram, summed
// over its series.
func (f *fixture) observed(metric string) uint64 {
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == metric {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}
