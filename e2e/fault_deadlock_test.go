package e2e

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestFaultDeadlock (V1: transaction deadlock).
//
// PostgreSQL: the server's business transaction inserts the payment, then
// records the outcome and its outbox row in one statement. A transaction
// of the test, on its own connection, takes the locks the other way
// round: it locks idem_outbox first (SHARE ROW EXCLUSIVE: inserts wait),
// waits until the server's outcome statement is blocked on that lock
// (pg_stat_activity, polled), then inserts a payment with the id the
// server's transaction has just inserted, which waits for the server's
// transaction: a cycle. The server's connections have the shorter
// deadlock_timeout (2s, set in its DSN; the test's is 60s), so PostgreSQL
// aborts the server's transaction with 40P01. The client gets 503
// STORE_UNAVAILABLE, the reservation is released, no payment and no
// outbox row is left, and a retry executes once.
//
// SQLite has no deadlocks: one writer at a time, and every write
// transaction takes the write lock before it reads (BEGIN IMMEDIATE), so
// no lock-order cycle can form. The analogue is a write lock held by
// another connection when the business transaction begins: the server
// waits (failpoint after-reserve=wait) until the test holds the lock,
// then its business transaction cannot start and --store-timeout (2s)
// fails it closed — 503 STORE_UNAVAILABLE — with nothing written; the
// reservation is released, or, if the release cannot get the lock
// either, left to the recovery worker (--lease 1s); a retry executes once.
//
// MariaDB: a real deadlock too, InnoDB's (deadlockMySQL).
func TestFaultDeadlock(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		deadlockPostgres(t)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		lockedSQLite(t)
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		deadlockMySQL(t)
	})
}

func deadlockPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	f := newFault(t, dsn)
	f.serverDSN = withParams(t, dsn, "deadlock_timeout", "2s")
	s := f.serve("A", nil, true, twoPhaseFlag, "--prune-interval", "0") // pruning deletes outbox rows: it would queue on the lock too
	key, body := f.key("deadlock"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	lockConn, watch := pgConn(t, ctx, dsn), pgConn(t, ctx, dsn)
	tx, err := lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '60s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE idem_outbox IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	answer := make(chan reply, 1)
	go func() {
		r, err := f.post(s, "/v1/payments", "demo", key, body)
		if err != nil {
			r = reply{status: -1, body: []byte(err.Error())}
		}
		answer <- r
	}()
	// The server's outcome statement (it inserts the outbox row) waits
	// for the test's table lock: its payment row is inserted by now.
	// (pg_locks: a backend that holds a lock on payments waits for one on
	// idem_outbox; the text in pg_stat_activity is cut at
	// track_activity_query_size, so the statement is not matched by text.)
	await(t, "the server's transaction blocks on idem_outbox", func() bool {
		var n int
		err := watch.QueryRow(ctx, businessBlocked).Scan(&n)
		return err == nil && n == 1
	})
	var op string
	if err := watch.QueryRow(ctx, `SELECT operation_id FROM idem_operations WHERE state IN ('RESERVED', 'EXECUTING')`).Scan(&op); err != nil {
		t.Fatalf("the reservation in flight: %v", err)
	}
	// Close the cycle: the payment id the server's transaction holds.
	_, err = tx.Exec(ctx, `INSERT INTO payments (id, operation_id, tenant, principal, amount, currency, payee, memo, created_at)
		VALUES ($1, $2, 'test', 'test', '0.01', 'EUR', 'test', NULL, '2000-01-01T00:00:00Z')`, payments.PaymentID(op), op)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		t.Fatalf("the test's transaction was chosen as the deadlock victim, not the server's: %v", err)
	}
	if err != nil {
		t.Fatalf("the test's insert after the server's transaction ended: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	var first reply
	select {
	case first = <-answer:
	case <-ctx.Done():
		t.Fatal("no answer to the deadlocked request")
	}
	wantProblem(t, "the deadlocked request", first, http.StatusServiceUnavailable, "STORE_UNAVAILABLE")
	awaitLog(t, s, "deadlock detected")
	if snap := f.takeSnapshot(); len(snap.Payments)+len(snap.Outbox)+len(snap.Operations) != 0 {
		t.Errorf("after the deadlock: %d payments, %d outbox rows, %d records; want nothing (all rolled back and released)",
			len(snap.Payments), len(snap.Outbox), len(snap.Operations))
	}
	wantCreated(t, "retry after the deadlock", f.mustPost(s, "/v1/payments", "demo", key, body))
	f.mustPost(s, "/v1/payments", "demo", key, body)
	if counts := f.check(allow{Unavailable: true}); counts["executed"] != 1 || counts["unavailable"] != 1 {
		t.Errorf("answers %v; want one 503, then one execution", counts)
	}
}

func lockedSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fault.db")
	f := newFault(t, "sqlite:"+path)
	s := f.serve("A", []string{"IDEM_FAILPOINTS=after-reserve=wait"}, false, twoPhaseFlag, "--store-timeout", "2s", "--lease", "1s", "--recover-interval", "200ms")
	key, body := f.key("locked"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`

	// Send until the request waits at the failpoint: on a loaded machine
	// the reservation itself may fail closed first (503, nothing reserved).
	answer := make(chan reply, 1)
	send := func() {
		r, err := f.post(s, "/v1/payments", "demo", key, body)
		if err != nil {
			r = reply{status: -1, body: []byte(err.Error())}
		}
		answer <- r
	}
	go send()
	await(t, "the request waits after its reservation", func() bool {
		select {
		case r := <-answer:
			wantProblem(t, "a request answered before its reservation", r, http.StatusServiceUnavailable, "STORE_UNAVAILABLE")
			go send()
		default:
		}
		return strings.Contains(s.child.Log(), "failpoint after-reserve waiting")
	})
	unlock := holdSQLiteWriteLock(t, path)
	start := time.Now()
	if err := s.child.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	first := <-answer
	took := time.Since(start)
	wantProblem(t, "the request whose business transaction found the write lock held", first, http.StatusServiceUnavailable, "STORE_UNAVAILABLE")
	if took > poolBound {
		t.Errorf("the 503 came %v after the lock was held; want about --store-timeout (2s) per call", took)
	}
	unlock()
	if snap := f.takeSnapshot(); len(snap.Payments)+len(snap.Outbox) != 0 {
		t.Errorf("after the refused transaction: %d payments, %d outbox rows; want none", len(snap.Payments), len(snap.Outbox))
	}
	// The failpoint waits at every reservation: each retry that reserves
	// anew needs a SIGUSR1. Retry (with Prefer: wait, for a reservation
	// left to recovery) until the outcome.
	var got reply
	await(t, "a retry executes", func() bool {
		done := make(chan reply, 1)
		go func() {
			r, err := f.post(s, "/v1/payments", "demo", key, body, "Prefer", "wait=3")
			if err != nil {
				r = reply{status: -1}
			}
			done <- r
		}()
		for {
			select {
			case got = <-done:
				return got.status == http.StatusCreated
			case <-time.After(50 * time.Millisecond):
				s.child.Signal(syscall.SIGUSR1)
			}
		}
	})
	f.mustPost(s, "/v1/payments", "demo", key, body)
	if counts := f.check(allow{Unavailable: true}); counts["executed"] != 1 {
		t.Errorf("answers %v; want exactly one execution", counts)
	}
	t.Logf("503 %v after the write lock was taken", took.Round(time.Millisecond))
}

// holdSQLiteWriteLock takes the database's write lock on a connection of
// the test (BEGIN IMMEDIATE) and returns the function that lets it go.
func holdSQLiteWriteLock(t *testing.T, path string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	done := false
	unlock = func() {
		if done {
			return
		}
		done = true
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
		db.Close()
	}
	t.Cleanup(unlock)
	return unlock
}

// businessBlocked counts the backends that hold a lock on payments (they
// inserted a payment) and wait for one on idem_outbox: business
// transactions blocked at their outcome statement.
const businessBlocked = `SELECT count(*) FROM pg_locks w JOIN pg_locks p ON p.pid = w.pid
	WHERE w.relation = 'idem_outbox'::regclass AND NOT w.granted AND p.relation = 'payments'::regclass AND p.granted`
