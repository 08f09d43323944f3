package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/registry/registrytest"
)

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	registrytest.Run(t, newHarness)
}

// testClock is a swappable injected clock: the zero time means database
// time.
type testClock struct{ t atomic.Pointer[time.Time] }

func (c *testClock) now() time.Time {
	if p := c.t.Load(); p != nil {
		return *p
	}
	return time.Time{}
}

func (c *testClock) set(t time.Time) { c.t.Store(&t) }

// openTest opens a Store on a fresh file in t's temporary directory, with
// an injectable clock, and closes it when t ends.
func openTest(t testing.TB) (*Store, *testClock) {
	t.Helper()
	return openTestAt(t, filepath.Join(t.TempDir(), "idem.db"))
}

// openTestAt is openTest on the database file at path.
func openTestAt(t testing.TB, path string) (*Store, *testClock) {
	t.Helper()
	clock := &testClock{}
	s, err := Open(context.Background(), "sqlite:"+path, Options{Now: clock.now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s, clock
}

// inTx is the harness's in-transaction claim: it begins a BEGIN IMMEDIATE
// transaction on the Store's database, claims in it, and commits when fn
// succeeded and the verdict is Execute; otherwise it rolls back (the
// claim may have rolled it back already).
func inTx(ctx context.Context, s *Store, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return registry.Result{}, translate(err)
	}
	res, err := s.ClaimAndExecute(ctx, tx, c, fn)
	if err != nil || res.Verdict != registry.Execute {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) && err == nil {
			return registry.Result{}, rbErr
		}
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return registry.Result{}, translate(err)
	}
	return res, nil
}

var failTrigger atomic.Int64

func newHarness(t *testing.T) *registrytest.Harness {
	path := filepath.Join(t.TempDir(), "idem.db")
	s, clock := openTestAt(t, path)
	db := s.DB()
	return &registrytest.Harness{
		Name:  "sqlite",
		Store: s,
		Sealed: func(t *testing.T, sealer registry.Sealer) registry.Store {
			st, err := Open(t.Context(), "sqlite:"+path, Options{Sealer: sealer})
			if err != nil {
				t.Fatalf("Open with a sealer: %v", err)
			}
			t.Cleanup(st.Close)
			return st
		},
		ClaimAndExecute: func(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
			return inTx(ctx, s, c, fn)
		},
		Exec: func(ctx context.Context, query string, args ...any) error {
			_, err := db.ExecContext(ctx, query, args...)
			return err
		},
		QueryInt: func(ctx context.Context, query string, args ...any) (int64, error) {
			var n int64
			err := db.QueryRowContext(ctx, query, args...).Scan(&n)
			return n, err
		},
		SetNow: clock.set,
		DropGuards: func(ctx context.Context) error {
			rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN ('idem_operations', 'idem_effects')`)
			if err != nil {
				return err
			}
			var names []string
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					rows.Close()
					return err
				}
				names = append(names, n)
			}
			rows.Close()
			for _, n := range names {
				if _, err := db.ExecContext(ctx, `DROP TRIGGER "`+n+`"`); err != nil {
					return err
				}
			}
			return rows.Err()
		},
		FailClaims: func(ctx context.Context, operation string) error {
			// DDL takes no parameters: quote the name as a SQL literal.
			stmt := fmt.Sprintf(`CREATE TRIGGER idem_test_fail_claims_%d BEFORE INSERT ON idem_operations
				WHEN NEW.operation = '%s'
				BEGIN SELECT RAISE(ABORT, 'injected failure'); END`,
				failTrigger.Add(1), strings.ReplaceAll(operation, "'", "''"))
			_, err := db.ExecContext(ctx, stmt)
			return err
		},
	}
}
