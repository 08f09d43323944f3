package e2e

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/internal/mytest"
)

// deadlockMySQL is TestFaultDeadlock on MariaDB. The server's business
// transaction (two-phase) inserts the payment, then records the outcome
// and inserts its outbox row. A REPEATABLE READ transaction of the test
// takes the locks the other way round: it first writes 1,000 rows of a
// ballast table (so that InnoDB, which rolls back the lighter of two
// deadlocked transactions, picks the server's), locks idem_outbox's
// whole index (SELECT … FOR UPDATE: a next-key lock on its supremum, so
// inserts wait), waits until the server's transaction waits for that
// lock (its INSERT in information_schema.PROCESSLIST, polled), then inserts a payment
// with the id the server's transaction has just inserted: a cycle.
// InnoDB aborts the server's transaction with 1213; the client gets 503
// STORE_UNAVAILABLE, the reservation is released, no payment and no
// outbox row is left, and a retry executes once.
func deadlockMySQL(t *testing.T) {
	native := mytest.DSN(t)
	f := newFault(t, mytest.AsURL(t, native))
	s := f.serve("A", nil, true, twoPhaseFlag, "--prune-interval", "0")
	key, body := f.key("deadlock"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1","memo":"x"}`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	db, err := sql.Open("mysql", native)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE deadlock_ballast (n INT PRIMARY KEY) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`INSERT INTO deadlock_ballast (n) WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1000) SELECT n FROM s`,
		`SELECT count(*) FROM idem_outbox FOR UPDATE`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	answer := make(chan reply, 1)
	go func() {
		r, err := f.post(s, "/v1/payments", "demo", key, body)
		if err != nil {
			r = reply{status: -1, body: []byte(err.Error())}
		}
		answer <- r
	}()
	// The server's outcome (it inserts the outbox row) waits for the
	// test's lock: its payment row is inserted by now.
	// (INNODB_TRX is a cached view on MariaDB that did not show the wait;
	// the processlist shows the statement in flight.)
	await(t, "the server's outbox insert waits for the test's lock", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.PROCESSLIST WHERE info LIKE 'INSERT INTO idem_outbox%'`).Scan(&n)
		return err == nil && n == 1
	})
	var op string
	if err := db.QueryRowContext(ctx, `SELECT operation_id FROM idem_operations WHERE state IN ('RESERVED', 'EXECUTING')`).Scan(&op); err != nil {
		t.Fatalf("the reservation in flight: %v", err)
	}
	// Close the cycle: the payment id the server's transaction holds.
	_, err = tx.ExecContext(ctx, `INSERT INTO payments (id, operation_id, tenant, principal, amount, currency, payee, memo, created_at)
		VALUES (?, ?, 'test', 'test', '0.01', 'EUR', 'test', NULL, '2000-01-01T00:00:00Z')`, payments.PaymentID(op), op)
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == 1213 {
		t.Fatalf("the test's transaction was chosen as the deadlock victim, not the server's: %v", err)
	}
	if err != nil {
		t.Fatalf("the test's insert after the server's transaction ended: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	var first reply
	select {
	case first = <-answer:
	case <-ctx.Done():
		t.Fatal("no answer to the deadlocked request")
	}
	wantProblem(t, "the deadlocked request", first, http.StatusServiceUnavailable, "STORE_UNAVAILABLE")
	awaitLog(t, s, "Deadlock found")
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
