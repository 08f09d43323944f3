package idempg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// observeWindow is how long TestCommitOutlivesContext watches for
// something that must not happen (Complete returning, the outcome
// becoming visible) after the caller's context ended: an absence can only
// be observed for a while. Without the guarantee it checks, both happen
// within milliseconds.
const observeWindow = 2 * time.Second

// TestCommitOutlivesContext: a COMMIT that waits for a synchronous standby
// is not cancelled when the caller's context ends. A cancelled wait would
// make the outcome visible on the primary before the standby has it — a
// retry would be answered from it, and lose it at a failover (pgx sends a
// cancel request when it abandons a connection whose context ended;
// docs/operations.md, "High availability"). So while replication is
// stalled the outcome stays invisible and Complete keeps waiting past its
// context's end; once the standby catches up it returns the committed
// record, which both servers have.
func TestCommitOutlivesContext(t *testing.T) {
	pair := pgtest.NewPair(t, true)
	dsn, err := pair.DSN("commit_wait")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	watch, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	if _, err := watch.Exec(ctx, `CREATE TABLE sync_wait_notes (note text)`); err != nil {
		t.Fatal(err)
	}

	for _, style := range []string{"complete", "in-tx"} {
		t.Run(style, func(t *testing.T) {
			var c registry.Claim
			c.Operation = "tests.sync-wait"
			c.Scope[0], c.Fingerprint[0] = byte(len(style)), 1
			rec, _, err := st.Reserve(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			resume, err := pair.PauseReplication()
			if err != nil {
				t.Fatal(err)
			}
			defer resume()

			callCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			out := registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{}`)}}
			go func() {
				if style == "complete" {
					_, err := st.Complete(callCtx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return out, nil })
					done <- err
					return
				}
				done <- st.InTx(callCtx, func(ctx context.Context, tx registry.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO sync_wait_notes VALUES ('in-tx')`)
					return err
				})
			}()
			waitFor(t, "a backend waiting for the standby (wait_event SyncRep)", func() bool {
				var n int
				err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n)
				return err == nil && n > 0
			})
			cancel()

			select {
			case err := <-done:
				t.Fatalf("the call returned (%v) after its context ended, while its commit still waited for the standby", err)
			case <-time.After(observeWindow):
			}
			var n int
			if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n); err != nil || n == 0 {
				t.Fatalf("no backend waits for the standby any more (%d, %v): the commit was cancelled", n, err)
			}
			if got, err := st.GetByID(ctx, rec.OperationID); err != nil || got.State != idem.StateReserved {
				t.Fatalf("while the standby lags, the record reads %s (%v); want RESERVED: the outcome is visible before it is replicated", got.State, err)
			}
			if notes := countNotes(t, watch); notes != 0 {
				t.Fatalf("while the standby lags, %d business rows are visible; want none", notes)
			}

			resume()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("once the standby caught up: %v; want the commit", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the call did not return within a minute of the standby catching up")
			}
			if style == "complete" {
				if got, err := st.GetByID(ctx, rec.OperationID); err != nil || got.State != idem.StateSucceeded {
					t.Fatalf("after the commit the record reads %s (%v); want SUCCEEDED", got.State, err)
				}
			} else if notes := countNotes(t, watch); notes != 1 {
				t.Fatalf("after the commit %d business rows; want 1", notes)
			}
			if _, err := watch.Exec(ctx, `DELETE FROM sync_wait_notes`); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// countNotes counts the rows of sync_wait_notes.
func countNotes(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(t.Context(), `SELECT count(*) FROM sync_wait_notes`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond every 20 ms until it holds, failing t after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
}

// TestCommitBatchLockWaitEnds: the statement sent with the COMMIT may wait
// for a lock (here another transaction holds idem_outbox), and that wait
// still ends with the caller's deadline although the COMMIT is not
// cancelled — when the statement is not yet prepared on the connection
// (pgx describes it first: the parse waits; ended under ctx) and when it
// is (the statement waits; ended by the transaction's lock_timeout). The
// call fails with registry.ErrUnavailable and nothing is recorded.
func TestCommitBatchLockWaitEnds(t *testing.T) {
	dsn := pgtest.DSN(t)
	if pgtest.Pooled() {
		t.Skip("through PgBouncer the store prepares nothing: the cold case is the warm one")
	}
	ctx := t.Context()
	st, err := Open(ctx, dsn+"&pool_max_conns=1", Options{LaneConns: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{}`)},
		Outbox: []registry.Message{{Topic: "t", Payload: []byte(`{}`)}}}
	once := func(scope byte, d time.Duration) (time.Duration, error) {
		var c registry.Claim
		c.Operation, c.Scope[0], c.Fingerprint[0] = "tests.lock-wait", scope, 1
		callCtx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		_, err := st.ExecuteOnce(callCtx, c, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return out, nil })
		return time.Since(start), err
	}
	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	lock := func() pgx.Tx {
		tx, err := holder.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, `LOCK TABLE idem_outbox IN SHARE ROW EXCLUSIVE MODE`)
		}
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}

	for _, tc := range []struct {
		name  string
		scope byte
		warm  bool
	}{{"cold", 1, false}, {"warm", 3, true}} {
		if tc.warm {
			if _, err := once(tc.scope-1, time.Minute); err != nil {
				t.Fatalf("%s: warming the statement: %v", tc.name, err)
			}
		}
		tx := lock()
		took, err := once(tc.scope, time.Second)
		tx.Rollback(ctx)
		if !errors.Is(err, registry.ErrUnavailable) || took > 20*time.Second {
			t.Errorf("%s: ExecuteOnce with idem_outbox locked: %v after %v; want ErrUnavailable about when its 1 s deadline passed", tc.name, err, took)
		}
		var c registry.Claim
		c.Scope[0] = tc.scope
		if _, err := st.Get(ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("%s: after the failed call the scope's record: %v; want none", tc.name, err)
		}
	}
}

// TestPreparedStatementGoesStale: the outcome statement that runLazy
// prepares outlives a change of the columns it returns (as a newer
// version's migration may make); the one call that finds it stale fails,
// and the next prepares it anew and succeeds on the same connection.
func TestPreparedStatementGoesStale(t *testing.T) {
	if pgtest.Pooled() {
		t.Skip("through PgBouncer the store prepares nothing")
	}
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	st, err := Open(ctx, dsn+"&pool_max_conns=1", Options{LaneConns: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{}`)}}
	once := func(scope byte) error {
		var c registry.Claim
		c.Operation, c.Scope[0], c.Fingerprint[0] = "tests.stale", scope, 1
		_, err := st.ExecuteOnce(ctx, c, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return out, nil })
		return err
	}
	if err := once(1); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `ALTER TABLE idem_operations ALTER COLUMN resp_location TYPE varchar(4000)`); err != nil {
		t.Fatal(err)
	}
	if err := once(2); !staleStatement(err) {
		t.Fatalf("the first call after the change: %v; want the stale statement's error (else this test proves nothing)", err)
	}
	if err := once(3); err != nil {
		t.Fatalf("the call after the stale one: %v; want the statement prepared anew", err)
	}
}
