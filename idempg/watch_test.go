package idempg

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// wakeTimeout bounds every wait on a wake-up: generous, since a test that
// reaches it has failed anyway.
const wakeTimeout = 30 * time.Second

// otherStore opens a second Store on ts's database, as another process
// would, and closes it when t ends.
func otherStore(t *testing.T, ts *testStore, opts Options) *Store {
	t.Helper()
	st, err := Open(t.Context(), ts.dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

// mustWatch watches scope on st and fails unless a wake-up is available.
func mustWatch(t *testing.T, st *Store, scope idem.ScopeHash) <-chan struct{} {
	t.Helper()
	ch, stop := st.Watch(t.Context(), scope)
	t.Cleanup(stop)
	if ch == nil {
		t.Fatal("Watch returned no channel")
	}
	return ch
}

// needsListen skips a test of the LISTEN connection when the tests run
// behind PgBouncer in transaction mode (pgtest.PoolerEnv): there the DSN
// says idem_pooler=transaction and the Store has no listener by design
// (TestPoolerParam).
func needsListen(t *testing.T) {
	t.Helper()
	if pgtest.Pooled() {
		t.Skip("LISTEN needs a session of its own; behind a transaction pooler the Store has none (TestPoolerParam)")
	}
}

// woken waits for ch to close, failing after wakeTimeout.
func woken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wakeTimeout):
		t.Fatalf("%s: no wake-up within %v", what, wakeTimeout)
	}
}

// TestWatchWakesOnCommit: Store B watches a scope that Store A holds in
// flight; every statement that moves the record out of flight (or to a new
// owner) wakes B's watcher through the database, and only it.
func TestWatchWakesOnCommit(t *testing.T) {
	needsListen(t)
	moves := map[string]func(t *testing.T, a *testStore, rec registry.Record){
		"complete": func(t *testing.T, a *testStore, rec registry.Record) {
			if _, err := a.Complete(t.Context(), rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
				return succeeded("done"), nil
			}); err != nil {
				t.Fatal(err)
			}
		},
		"release": func(t *testing.T, a *testStore, rec registry.Record) {
			if err := a.Release(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
		},
		"take over": func(t *testing.T, a *testStore, rec registry.Record) {
			a.setNow(time.Now().Add(time.Hour)) // the lease has expired
			defer a.setNow(time.Time{})
			if _, err := a.TakeOver(t.Context(), rec, time.Minute); err != nil {
				t.Fatal(err)
			}
		},
		"mark unknown": func(t *testing.T, a *testStore, rec registry.Record) {
			if _, err := a.Pool().Exec(t.Context(), `UPDATE idem_operations SET state = 'EXECUTING' WHERE scope = $1`, rec.Scope[:]); err != nil {
				t.Fatal(err)
			}
			if _, err := a.MarkUnknown(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
		},
	}
	a := openStore(t, "")
	b := otherStore(t, a, Options{})
	for name, move := range moves {
		t.Run(name, func(t *testing.T) {
			c := newClaim("watch")
			c.Lease = time.Minute
			rec := mustReserve(t, a, c)
			bystander := mustWatch(t, b, newClaim("watch").Scope)
			ch := mustWatch(t, b, c.Scope)
			move(t, a, rec)
			woken(t, ch, name)
			select {
			case <-bystander:
				t.Errorf("%s woke the watcher of another scope", name)
			default:
			}
		})
	}
}

// TestNotifyOnlyWithWaiters: without a waiter row the statements that
// move records do not notify at all (no notify lock at commit); with one
// they do. A raw connection listens on the channel; a marker notification
// sent after the moves must be the first it receives.
func TestNotifyOnlyWithWaiters(t *testing.T) {
	needsListen(t)
	a := openStore(t, "")
	b := otherStore(t, a, Options{})
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, a.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `LISTEN idem_changed`); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
		defer cancel()
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("WaitForNotification: %v", err)
		}
		return n.Payload
	}
	done := func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return succeeded("done"), nil
	}
	for range 5 {
		if _, err := a.Complete(ctx, mustReserve(t, a, newClaim("quiet")), done); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx, mustReserve(t, a, newClaim("quiet"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Pool().Exec(ctx, `NOTIFY idem_changed, 'marker'`); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "marker" {
		t.Fatalf("first notification %q, want the marker: a move without waiters notified", got)
	}

	c := newClaim("watched")
	rec := mustReserve(t, a, c)
	ch := mustWatch(t, b, c.Scope)
	if _, err := a.Complete(ctx, rec, done); err != nil {
		t.Fatal(err)
	}
	if got, want := next(), hex.EncodeToString(c.Scope[:]); got != want {
		t.Fatalf("notification %q, want the scope %q", got, want)
	}
	woken(t, ch, "complete")
}

// TestWatchStopDeletesRow: stop removes the waiter row; expired rows are
// deleted by the next Watch.
func TestWatchStopDeletesRow(t *testing.T) {
	needsListen(t)
	a := openStore(t, "")
	ctx := t.Context()
	rows := func() int {
		t.Helper()
		var n int
		if err := a.Pool().QueryRow(ctx, `SELECT count(*) FROM idem_waiters`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := a.Pool().Exec(ctx, `INSERT INTO idem_waiters VALUES ('\x00', 'crashed', now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	ch, stop := a.Watch(ctx, newClaim("w").Scope)
	if ch == nil {
		t.Fatal("Watch returned no channel")
	}
	if n := rows(); n != 1 {
		t.Errorf("%d waiter rows while watching, want 1 (the expired one deleted)", n)
	}
	stop()
	if n := rows(); n != 0 {
		t.Errorf("%d waiter rows after stop, want 0", n)
	}
}

// TestCloseStopsListener: Close ends the listener's goroutine and wakes
// its watchers; Watch afterwards offers no wake-up.
func TestCloseStopsListener(t *testing.T) {
	needsListen(t)
	a := openStore(t, "")
	st, err := Open(t.Context(), a.dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := st.Watch(t.Context(), newClaim("w").Scope)
	if ch == nil {
		t.Fatal("Watch returned no channel")
	}
	st.Close()
	woken(t, st.listener.done, "the listener goroutine")
	woken(t, ch, "the watcher at Close")
	stop()
	if ch, _ := st.Watch(t.Context(), newClaim("w").Scope); ch != nil {
		t.Error("Watch after Close returned a channel")
	}
}

// TestNoListen: with Options.NoListen, Watch offers no wake-up and writes
// no waiter row.
func TestNoListen(t *testing.T) {
	a := openStore(t, "")
	st := otherStore(t, a, Options{NoListen: true})
	ch, stop := st.Watch(t.Context(), newClaim("w").Scope)
	defer stop()
	if ch != nil {
		t.Error("Watch with NoListen returned a channel")
	}
	var n int
	if err := a.Pool().QueryRow(t.Context(), `SELECT count(*) FROM idem_waiters`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d waiter rows (err %v), want 0", n, err)
	}
}

// TestWatchWakesOnLostConnection: when the listener's connection is
// terminated its watchers are woken (a notification may have been
// missed), and the listener comes back for later watches.
func TestWatchWakesOnLostConnection(t *testing.T) {
	needsListen(t)
	a := openStore(t, "")
	b := otherStore(t, a, Options{})
	ch := mustWatch(t, b, newClaim("w").Scope)
	if _, err := a.Pool().Exec(t.Context(),
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN idem_changed%' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	woken(t, ch, "the watcher at a lost connection")
	// The listener reconnects: a later watch is woken by a commit again.
	c := newClaim("w")
	rec := mustReserve(t, a, c)
	deadline := time.Now().Add(wakeTimeout)
	var again <-chan struct{}
	for again == nil && time.Now().Before(deadline) {
		var stop func()
		again, stop = b.Watch(t.Context(), c.Scope)
		t.Cleanup(stop)
		if again == nil {
			<-b.listener.reconnected()
		}
	}
	if again == nil {
		t.Fatal("the listener did not come back")
	}
	if err := a.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	woken(t, again, "release after the reconnect")
}
