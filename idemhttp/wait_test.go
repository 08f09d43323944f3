package idemhttp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestPreferWaitWakesOnCommit: two processes (two Stores, two
// middlewares) share a PostgreSQL registry. A duplicate with Prefer:
// wait=30 reaching B while A executes the operation gets the outcome as
// soon as A commits: B's fallback poll is set to an hour, so only the
// wake-up on A's commit (LISTEN/NOTIFY, through registry.WithTimeout's
// wrapper) can answer it within the wait.
func TestPreferWaitWakesOnCommit(t *testing.T) {
	dsn := pgtest.DSN(t)
	open := func() registry.Store {
		st, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	storeA, storeB := open(), open()
	if err := storeA.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE mw_effects (operation_id TEXT NOT NULL, note TEXT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := storeB.(registry.Watcher); !ok {
		t.Fatal("the PostgreSQL store is not a registry.Watcher")
	}
	a := newFixture(t, storeA, idemhttp.Enforce)
	b := newFixtureWith(t, registry.WithTimeout(storeB, registry.DefaultCallTimeout), idemhttp.Enforce, func(m *idemhttp.Middleware) {
		m.WaitCap = time.Minute
		idemhttp.SetPollForTest(m, time.Hour, time.Hour)
	})
	var wg sync.WaitGroup
	var first, waited result
	var once sync.Once
	release := func() { once.Do(func() { close(a.app.release) }) }
	defer release() // a failed test must not leave the handler blocked
	wg.Go(func() { first = a.post("wake", `{}`, "X-Test", "block") })
	<-a.app.started
	start := time.Now()
	wg.Go(func() { waited = b.post("wake", `{}`, "Prefer", "wait=30") })
	waitUntil(t, "B's waiter row", func() bool {
		var n int
		err := storeA.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM idem_waiters`).Scan(&n)
		})
		return err == nil && n > 0
	})
	release()
	wg.Wait()
	if first.status != 201 {
		t.Fatalf("first: %+v", first)
	}
	if waited.status != 201 || waited.body != first.body || waited.header.Get("Idempotent-Replayed") != "true" ||
		waited.header.Get("Preference-Applied") != "wait=30" {
		t.Errorf("the waiter did not replay the outcome:\n first %+v\n got   %+v", first, waited)
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("the waiter answered after %v: woken by the wait's end, not the commit", d)
	}
	if n := a.app.calls.Load() + b.app.calls.Load(); n != 1 {
		t.Errorf("handlers ran %d times, want 1", n)
	}
}
