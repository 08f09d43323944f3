package idempg

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// These tests cover what the conformance suite cannot see from outside:
// migrations, error translation, the transaction-local durability setting
// and the blocking behaviour of racing in-transaction claims.

func newClaim(operation string) registry.Claim {
	c := registry.Claim{Operation: operation, WriterEpoch: 1}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rand.Read(c.Owner[:])
	return c
}

func succeeded(tag string) registry.Outcome {
	return registry.Outcome{
		State:    idem.StateSucceeded,
		Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte(tag)},
		Outbox:   []registry.Message{{Topic: "t", Payload: []byte(tag)}},
	}
}

func record(out registry.Outcome) registry.BusinessFunc {
	return func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return out, nil }
}

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	const openers = 8
	var wg sync.WaitGroup
	errs := make([]error, openers)
	for i := range openers {
		wg.Go(func() {
			if i%2 == 0 {
				errs[i] = Migrate(ctx, dsn)
				return
			}
			st, err := Open(ctx, dsn, Options{})
			if err == nil {
				st.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	if err := Migrate(ctx, dsn); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	rows, _ := poolFor(t, dsn).Query(ctx, `SELECT version FROM idem_schema_migrations ORDER BY version`)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	want := embeddedMigrations(t)
	if err != nil || len(want) < 8 || !slices.Equal(versions, want) {
		t.Errorf("applied migrations %v (err %v), want %v", versions, err, want)
	}
}

// TestReserveDurabilitySettingIsLocal checks that Reserve's
// synchronous_commit = off does not leak into the pooled session, where it
// would make Complete's commit asynchronous too.
func TestReserveDurabilitySettingIsLocal(t *testing.T) {
	t.Parallel()
	ts := openStore(t, "&pool_max_conns=1")
	ctx := t.Context()
	if _, _, err := ts.Reserve(ctx, newClaim("durability")); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := ts.Pool().QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v); err != nil || v != "on" {
		t.Errorf("synchronous_commit on the pooled session after Reserve = %q (err %v), want on", v, err)
	}
}

// waitLockWaiters waits until n sessions of the store's database wait for
// a lock.
func waitLockWaiters(t *testing.T, ts *testStore, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got int
		err := ts.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClaimWaitsForUncommittedWinner: a claim, and a Reserve, racing an
// uncommitted in-transaction claim block until it ends; then they replay
// the committed outcome, or — when the winner rolled back — own the scope.
func TestClaimWaitsForUncommittedWinner(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			t.Parallel()
			ts := openStore(t, "")
			ctx := t.Context()
			c := newClaim("blocking")
			tx, err := ts.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			won, err := ts.ClaimAndExecute(ctx, tx, c, record(succeeded("winner")))
			if err != nil || won.Verdict != registry.Execute {
				t.Fatalf("winner: %v %v", won.Verdict, err)
			}
			if won.Record.State != idem.StateSucceeded || won.Record.Response == nil {
				t.Errorf("winner's record: %+v", won.Record)
			}
			var wg sync.WaitGroup
			var loser registry.Result
			var loserErr, reserveErr error
			var reserved registry.Record
			var created bool
			wg.Go(func() { loser, loserErr = claimAndExecute(ctx, ts.Store, false, c, record(succeeded("loser"))) })
			wg.Go(func() { reserved, created, reserveErr = ts.Reserve(ctx, c) })
			waitLockWaiters(t, ts, 2)
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if loserErr != nil || reserveErr != nil {
				t.Fatalf("loser: %v; Reserve: %v", loserErr, reserveErr)
			}
			if commit {
				if loser.Verdict != registry.Replay || loser.Record.OperationID != won.Record.OperationID {
					t.Errorf("claim after the winner committed: %v on %s, want replay of %s", loser.Verdict, loser.Record.OperationID, won.Record.OperationID)
				}
				if created || registry.Decide(reserved, false, c.Fingerprint) != registry.Replay {
					t.Errorf("Reserve after the winner committed: created %v state %s, want a replay", created, reserved.State)
				}
				return
			}
			// The rolled-back winner left the scope free: exactly one of the
			// two waiters took it. If the claim did, Reserve waited for its
			// commit and replays it; if Reserve did, the claim finds the
			// reservation in flight.
			switch {
			case loser.Verdict == registry.Execute && !created && registry.Decide(reserved, false, c.Fingerprint) == registry.Replay:
			case created && loser.Verdict == registry.InProgress:
			default:
				t.Errorf("after the winner rolled back: claim %v, Reserve created %v state %s", loser.Verdict, created, reserved.State)
			}
		})
	}
}

func TestTxAdapterNative(t *testing.T) {
	t.Parallel()
	ts := openStore(t, "")
	_, err := ts.Complete(t.Context(), mustReserve(t, ts, newClaim("native")), func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		ptx, ok := tx.Native().(pgx.Tx)
		if !ok {
			return registry.Outcome{}, fmt.Errorf("Native() is %T, want pgx.Tx", tx.Native())
		}
		var n int
		if err := ptx.QueryRow(ctx, `SELECT count(*) FROM idem_operations WHERE operation_id = $1`, rec.OperationID).Scan(&n); err != nil || n != 1 {
			return registry.Outcome{}, fmt.Errorf("native query: %d rows, %v", n, err)
		}
		return succeeded("native"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustReserve(t *testing.T, ts *testStore, c registry.Claim) registry.Record {
	t.Helper()
	rec, created, err := ts.Reserve(t.Context(), c)
	if err != nil || !created {
		t.Fatalf("Reserve: created %v err %v", created, err)
	}
	return rec
}

func TestTranslate(t *testing.T) {
	deadline, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	<-deadline.Done()
	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
		notFound    bool
	}{
		{"no rows", pgx.ErrNoRows, false, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false, false},
		{"check violation", &pgconn.PgError{Code: "23514"}, false, false},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, true, false},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true, false},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, true, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true, false},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true, false},
		{"deadline", fmt.Errorf("query: %w", deadline.Err()), true, false},
		{"caller cancelled", context.Canceled, false, false},
		{"net error", &net.OpError{Op: "read", Err: errors.New("reset")}, true, false},
	} {
		got := translate(tc.err)
		if errors.Is(got, registry.ErrUnavailable) != tc.unavailable || errors.Is(got, registry.ErrNotFound) != tc.notFound {
			t.Errorf("%s: translate(%v) = %v; want unavailable %v, not found %v", tc.name, tc.err, got, tc.unavailable, tc.notFound)
		}
		if errors.Is(got, registry.ErrFenced) {
			t.Errorf("%s: translated to ErrFenced", tc.name)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = Open(t.Context(), "postgres://postgres@"+addr+"/x?sslmode=disable&connect_timeout=5", Options{})
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("Open of an unreachable server: %v, want ErrUnavailable", err)
	}
}

// TestSchemaRefusesTerminalWithoutDigest: a terminal record must carry a
// digest; a NULL one is refused rather than slipping through the CHECK.
func TestSchemaRefusesTerminalWithoutDigest(t *testing.T) {
	t.Parallel()
	ts := openStore(t, "")
	rec := mustReserve(t, ts, newClaim("schema"))
	_, err := ts.Pool().Exec(t.Context(), `UPDATE idem_operations SET state = 'SUCCEEDED', resp_status = 200,
		resp_media_type = '', resp_location = '', resp_etag = '', resp_body = '', resp_digest = NULL
		WHERE scope = $1`, rec.Scope[:])
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Errorf("terminal state without digest: %v, want a check violation", err)
	}
}

// migrateBefore applies, on an empty database, the embedded migrations
// whose versions sort before version ("008": 001 to 007) and records them
// as applied, as Open would have: the starting point of an upgrade test.
func migrateBefore(t *testing.T, pool *pgxpool.Pool, version string) {
	t.Helper()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, queries.Get("CreateMigrationsTable")); err != nil {
		t.Fatal(err)
	}
	for _, v := range embeddedMigrations(t) {
		if v >= version {
			break
		}
		ddl, err := fs.ReadFile(migrationFS, "migrations/"+v+".sql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(ddl)); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if _, err := pool.Exec(ctx, queries.Get("RecordMigration"), v); err != nil {
			t.Fatal(err)
		}
	}
}

// upgradeFrom opens a pool on a fresh database on which the migrations
// before version are applied (migrateBefore), closed when t ends, and
// returns it with the database's DSN: the start of an upgrade test.
func upgradeFrom(t *testing.T, version string) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := pgtest.DSN(t)
	pool := poolFor(t, dsn)
	migrateBefore(t, pool, version)
	return pool, dsn
}

// embeddedMigrations lists the versions of migrations/*.sql in order.
func embeddedMigrations(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	versions := make([]string, len(files))
	for i, f := range files {
		versions[i] = strings.TrimSuffix(path.Base(f), ".sql")
	}
	return versions
}

// poolFor opens a pool of the test's own on dsn, with idem_pooler applied
// as Open applies it (behind PgBouncer, no named prepared statements),
// and closes it when t ends.
func poolFor(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := applyPooler(cfg, &Options{}); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
