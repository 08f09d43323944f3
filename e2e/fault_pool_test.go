package e2e

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
)

// poolBound is the most a request may take to fail closed while the
// database is held: --store-timeout (1s) per registry call, a few calls,
// and a slow machine's slack.
const poolBound = 10 * time.Second

// TestFaultPoolExhaustion (V1: connection-pool timeout).
//
// PostgreSQL: the server runs with pool_max_conns=1 and --store-timeout
// 1s. A test transaction locks idem_outbox, so the first request's
// business transaction — holding the pool's only connection — blocks at
// its outcome statement. Meanwhile more requests, with other keys, find
// no connection. Every request fails closed with 503 STORE_UNAVAILABLE
// within poolBound (the blocked one too, when its own call times out), no
// reservation is left behind (released, or taken over by recovery), and
// once the lock is gone every key's retry executes exactly once.
//
// SQLite has no connection pool to exhaust (one writer at a time); the
// analogue is the write lock held by another connection: the same
// requests fail closed the same way, and succeed once it is released.
//
// MariaDB: the analogue is idem_outbox held by a test connection's
// LOCK TABLES … WRITE (holdMySQLOutbox): every request's transaction
// blocks at its outbox insert, on the table's metadata lock, past
// --store-timeout 1s; the requests fail closed the same way, and succeed
// once the table is unlocked.
func TestFaultPoolExhaustion(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := pgtest.DSN(t)
		f := newFault(t, dsn)
		f.serverDSN = withParams(t, dsn, "pool_max_conns", "1")
		// No prune loop: it deletes outbox rows, so it would queue on the
		// test's lock too, holding the one connection in place of a request.
		s := f.serve("A", nil, true, "--store-timeout", "1s", "--lease", "2s", "--recover-interval", "200ms", "--prune-interval", "0")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		lockConn, watch := pgConn(t, ctx, dsn), pgConn(t, ctx, dsn)
		tx, err := lockConn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, `LOCK TABLE idem_outbox IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		holder := f.key("pool-holder")
		body := func() string { return `{"amount":"` + f.amount() + `","currency":"EUR","payee":"acct_1"}` }
		holderBody := body()
		first := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			f.post(s, "/v1/payments", "demo", holder, holderBody)
			first <- time.Since(start)
		}()
		await(t, "the first request's transaction holds the only connection, blocked on idem_outbox", func() bool {
			var n int
			err := watch.QueryRow(ctx, businessBlocked).Scan(&n)
			return err == nil && n == 1
		})
		keys, bodies := starve(t, f, s, pick(8, 32), body)
		took := <-first
		if took > poolBound {
			t.Errorf("the request holding the connection answered after %v; want within %v", took, poolBound)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		settle(t, f, s, append(keys, holder), append(bodies, holderBody))
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		native := mytest.DSN(t)
		f := newFault(t, mytest.AsURL(t, native))
		s := f.serve("A", nil, true, "--store-timeout", "1s", "--lease", "2s", "--recover-interval", "200ms", "--prune-interval", "0")
		body := func() string { return `{"amount":"` + f.amount() + `","currency":"EUR","payee":"acct_1"}` }
		unlock := holdMySQLOutbox(t, native)
		keys, bodies := starve(t, f, s, pick(8, 32), body)
		unlock()
		settle(t, f, s, keys, bodies)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "fault.db")
		f := newFault(t, "sqlite:"+path)
		s := f.serve("A", nil, true, "--store-timeout", "1s", "--lease", "2s", "--recover-interval", "200ms")
		body := func() string { return `{"amount":"` + f.amount() + `","currency":"EUR","payee":"acct_1"}` }
		unlock := holdSQLiteWriteLock(t, path)
		keys, bodies := starve(t, f, s, pick(8, 32), body)
		unlock()
		settle(t, f, s, keys, bodies)
	})
}

// starve sends n requests with fresh keys at once while the database is
// held, and checks that each fails closed with 503 STORE_UNAVAILABLE
// within poolBound.
func starve(t *testing.T, f *faultRun, s *server, n int, body func() string) (keys, bodies []string) {
	t.Helper()
	for range n {
		keys, bodies = append(keys, f.key("pool")), append(bodies, body())
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			r, err := f.post(s, "/v1/payments", "demo", keys[i], bodies[i])
			took := time.Since(start)
			switch {
			case err != nil:
				t.Errorf("request %d while the database is held: %v", i, err)
			case took > poolBound:
				t.Errorf("request %d while the database is held answered after %v; want within %v", i, took, poolBound)
			default:
				wantProblem(t, "request while the database is held", r, http.StatusServiceUnavailable, "STORE_UNAVAILABLE")
			}
		})
	}
	wg.Wait()
	return keys, bodies
}

// settle retries every key (Prefer: wait, for reservations left to
// recovery) until each has its 201, replays each once more and checks
// the history: nothing lost, nothing executed twice.
func settle(t *testing.T, f *faultRun, s *server, keys, bodies []string) {
	t.Helper()
	for i, key := range keys {
		await(t, "the retry of "+key+" executes", func() bool {
			r, err := f.post(s, "/v1/payments", "demo", key, bodies[i], "Prefer", "wait=2")
			return err == nil && r.status == http.StatusCreated
		})
		f.mustPost(s, "/v1/payments", "demo", key, bodies[i])
	}
	if counts := f.check(allow{Unavailable: true}); counts["executed"] != len(keys) {
		t.Errorf("answers %v; want exactly %d executions, one per key", counts, len(keys))
	}
}

// holdMySQLOutbox locks idem_outbox of the MariaDB database native (a
// DSN of mytest.DSN) for WRITE on a connection of the test's own, so
// every statement of another session that touches the table waits for
// its metadata lock; unlock releases it (also at the end of the test).
func holdMySQLOutbox(t *testing.T, native string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("mysql", native)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "LOCK TABLES idem_outbox WRITE"); err != nil {
		t.Fatal(err)
	}
	done := false
	unlock = func() {
		if done {
			return
		}
		done = true
		if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
			t.Error(err)
		}
		conn.Close()
		db.Close()
	}
	t.Cleanup(unlock)
	return unlock
}
