package idempg

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Complete sends the outcome statement and COMMIT in one batch on a
// connection it holds itself. These tests run on a pool of one connection,
// so each checks that the connection comes back idle and usable, with
// synchronous_commit on, whatever the way Complete ended.

// checkPooledSession fails the test unless the pool's only connection is
// still the one with backend process pid (the pool destroys a connection
// returned inside a transaction), idle outside any transaction, with
// synchronous_commit on.
func checkPooledSession(t *testing.T, ts *testStore, pid uint32, after string) {
	t.Helper()
	c, err := ts.Pool().Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if got := c.Conn().PgConn().PID(); got != pid {
		t.Errorf("after %s: the pooled connection was replaced (backend %d, was %d)", after, got, pid)
	}
	if st := c.Conn().PgConn().TxStatus(); st != 'I' {
		t.Errorf("after %s: transaction status %q, want idle", after, st)
	}
	var sync string
	if err := c.QueryRow(t.Context(), `SHOW synchronous_commit`).Scan(&sync); err != nil || sync != "on" {
		t.Errorf("after %s: synchronous_commit %q (err %v), want on", after, sync, err)
	}
}

// backendPID returns the backend process of the pool's only connection.
func backendPID(t *testing.T, ts *testStore) uint32 {
	t.Helper()
	c, err := ts.Pool().Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	return c.Conn().PgConn().PID()
}

// businessRows counts the rows insertRow wrote for id.
func businessRows(t *testing.T, ts *testStore, id string) int {
	t.Helper()
	var n int
	if err := ts.Pool().QueryRow(t.Context(), `SELECT count(*) FROM exec_rows WHERE id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func execStore(t *testing.T) *testStore {
	t.Helper()
	ts := openStore(t, "&pool_max_conns=1")
	if _, err := ts.Pool().Exec(t.Context(), `CREATE TABLE exec_rows (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return ts
}

// insertRow is a business function writing one row keyed by the operation
// ID and answering out.
func insertRow(out registry.Outcome) registry.BusinessFunc {
	return func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		_, err := tx.Exec(ctx, `INSERT INTO exec_rows (id) VALUES ($1)`, rec.OperationID)
		return out, err
	}
}

func TestCompleteCommitsOutcomeAndBusinessTogether(t *testing.T) {
	t.Parallel()
	ts := execStore(t)
	ctx := t.Context()
	pid := backendPID(t, ts)
	rec, created, err := ts.Reserve(ctx, newClaim("exec.ok"))
	if err != nil || !created {
		t.Fatalf("Reserve: created %v err %v", created, err)
	}
	done, err := ts.Complete(ctx, rec, insertRow(succeeded("ok")))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if done.State != idem.StateSucceeded || done.Response == nil || string(done.Response.Body) != "ok" {
		t.Errorf("Complete returned state %s response %+v", done.State, done.Response)
	}
	checkPooledSession(t, ts, pid, "Complete")
	got, err := ts.Get(ctx, rec.Scope)
	if err != nil || got.State != idem.StateSucceeded || got.UpdatedAt != done.UpdatedAt {
		t.Errorf("stored: state %s updated %v err %v, want SUCCEEDED %v", got.State, got.UpdatedAt, err, done.UpdatedAt)
	}
	if n := businessRows(t, ts, rec.OperationID); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
}

// TestCompleteFencedRollsBack: a completion whose compare-and-set matches
// nothing fails in the database, so the COMMIT sent behind it rolls the
// business row back; the error is ErrFenced, or ErrWriterFenced when the
// writer epoch moved on.
func TestCompleteFencedRollsBack(t *testing.T) {
	t.Parallel()
	ts := execStore(t)
	ctx := t.Context()
	pid := backendPID(t, ts)
	rec, _, err := ts.Reserve(ctx, newClaim("exec.fenced"))
	if err != nil {
		t.Fatal(err)
	}
	stale := rec
	stale.OwnerGen++ // a generation the record never had
	if _, err := ts.Complete(ctx, stale, insertRow(succeeded("stale"))); !errors.Is(err, registry.ErrFenced) {
		t.Errorf("Complete at a wrong generation: %v, want ErrFenced", err)
	}
	checkPooledSession(t, ts, pid, "a fenced Complete")
	if n := businessRows(t, ts, rec.OperationID); n != 0 {
		t.Errorf("the fenced Complete left %d business rows", n)
	}

	for range 2 { // the registry moves to epoch 2, past the record's 1
		if _, err := ts.BumpEpoch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = ts.Complete(ctx, rec, insertRow(succeeded("old epoch")))
	if !errors.Is(err, registry.ErrWriterFenced) {
		t.Errorf("Complete by an older writer: %v, want ErrWriterFenced", err)
	}
	checkPooledSession(t, ts, pid, "a writer-fenced Complete")
	if n := businessRows(t, ts, rec.OperationID); n != 0 {
		t.Errorf("the writer-fenced Complete left %d business rows", n)
	}
	if got, err := ts.Get(ctx, rec.Scope); err != nil || got.State != idem.StateReserved {
		t.Errorf("after fenced completions: state %s err %v, want RESERVED", got.State, err)
	}
}

// TestCompleteBusinessFailureRollsBack: a failed business statement that
// fn ignores, and fn's own error, both leave nothing committed.
func TestCompleteBusinessFailureRollsBack(t *testing.T) {
	t.Parallel()
	ts := execStore(t)
	ctx := t.Context()
	pid := backendPID(t, ts)
	rec, _, err := ts.Reserve(ctx, newClaim("exec.fail"))
	if err != nil {
		t.Fatal(err)
	}
	ignoring := func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		tx.Exec(ctx, `INSERT INTO exec_rows (id) VALUES ($1)`, rec.OperationID)
		tx.Exec(ctx, `INSERT INTO no_such_table VALUES (1)`) // aborts the transaction; error ignored
		return succeeded("ignored"), nil
	}
	if _, err := ts.Complete(ctx, rec, ignoring); err == nil {
		t.Error("Complete after a failed statement succeeded")
	}
	checkPooledSession(t, ts, pid, "a Complete in an aborted transaction")
	boom := errors.New("boom")
	if _, err := ts.Complete(ctx, rec, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		_, err := tx.Exec(ctx, `INSERT INTO exec_rows (id) VALUES ($1)`, rec.OperationID)
		return registry.Outcome{}, errors.Join(err, boom)
	}); !errors.Is(err, boom) {
		t.Errorf("Complete with a failing fn: %v, want fn's error", err)
	}
	checkPooledSession(t, ts, pid, "a failing fn")
	if n := businessRows(t, ts, rec.OperationID); n != 0 {
		t.Errorf("%d business rows, want 0", n)
	}
	if got, err := ts.Get(ctx, rec.Scope); err != nil || got.State != idem.StateReserved {
		t.Errorf("state %s err %v, want RESERVED", got.State, err)
	}
}

// TestCompleteRefusesEndedTransaction: a business function that commits
// the native transaction itself gets no outcome recorded (the outcome
// would otherwise commit on its own, outside the business transaction).
func TestCompleteRefusesEndedTransaction(t *testing.T) {
	t.Parallel()
	ts := execStore(t)
	ctx := t.Context()
	pid := backendPID(t, ts)
	rec, _, err := ts.Reserve(ctx, newClaim("exec.ended"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ts.Complete(ctx, rec, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		return succeeded("ended"), tx.Native().(pgx.Tx).Commit(ctx)
	})
	if err == nil {
		t.Error("Complete recorded an outcome after fn committed the transaction itself")
	}
	checkPooledSession(t, ts, pid, "fn ending the transaction")
	if got, err := ts.Get(ctx, rec.Scope); err != nil || got.State != idem.StateReserved {
		t.Errorf("state %s err %v, want RESERVED", got.State, err)
	}
}

// TestCompleteLazyBegin: the transaction Complete hands fn begins with
// fn's first statement, whichever way fn makes it (Exec, QueryRow,
// through Native, or none at all), and every write commits with the
// outcome.
func TestCompleteLazyBegin(t *testing.T) {
	t.Parallel()
	ts := execStore(t)
	ctx := t.Context()
	pid := backendPID(t, ts)
	insert := func(ctx context.Context, tx registry.Tx, id string) error {
		_, err := tx.Exec(ctx, `INSERT INTO exec_rows (id) VALUES ($1)`, id)
		return err
	}
	for _, c := range []struct {
		name string
		fn   func(ctx context.Context, tx registry.Tx, rec registry.Record) error
		rows int
	}{
		{"no statement", func(context.Context, registry.Tx, registry.Record) error { return nil }, 0},
		{"exec then native", func(ctx context.Context, tx registry.Tx, rec registry.Record) error {
			if err := insert(ctx, tx, rec.OperationID); err != nil {
				return err
			}
			_, err := tx.Native().(pgx.Tx).Exec(ctx, `INSERT INTO exec_rows (id) VALUES ($1)`, rec.OperationID+"-native")
			return err
		}, 2},
		{"native first", func(ctx context.Context, tx registry.Tx, rec registry.Record) error {
			if _, err := tx.Native().(pgx.Tx).Exec(ctx, `INSERT INTO exec_rows (id) VALUES ($1)`, rec.OperationID); err != nil {
				return err
			}
			return insert(ctx, tx, rec.OperationID+"-2")
		}, 2},
		{"query first", func(ctx context.Context, tx registry.Tx, rec registry.Record) error {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM exec_rows WHERE id = $1`, rec.OperationID).Scan(&n); err != nil || n != 0 {
				return errors.Join(err, errors.New("unexpected row"))
			}
			if err := insert(ctx, tx, rec.OperationID); err != nil {
				return err
			}
			// The transaction sees its own write.
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM exec_rows WHERE id = $1`, rec.OperationID).Scan(&n); err != nil || n != 1 {
				return errors.Join(err, errors.New("own write not visible"))
			}
			return nil
		}, 1},
	} {
		rec, _, err := ts.Reserve(ctx, newClaim("exec.lazy"))
		if err != nil {
			t.Fatal(err)
		}
		done, err := ts.Complete(ctx, rec, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			return succeeded(c.name), c.fn(ctx, tx, rec)
		})
		if err != nil || done.State != idem.StateSucceeded {
			t.Errorf("%s: Complete: state %s err %v", c.name, done.State, err)
		}
		checkPooledSession(t, ts, pid, c.name)
		var n int
		if err := ts.Pool().QueryRow(ctx, `SELECT count(*) FROM exec_rows WHERE id LIKE $1 || '%'`, rec.OperationID).Scan(&n); err != nil || n != c.rows {
			t.Errorf("%s: %d business rows (err %v), want %d", c.name, n, err, c.rows)
		}
	}
}
