package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/registry/registrytest"
)

func TestMain(m *testing.M) { mytest.Main(m) }

// TestConformance runs the conformance suite on a fresh database per case.
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

// openTest opens a Store on a fresh database of the shared test server,
// with an injectable clock, and closes it when t ends.
func openTest(t testing.TB) (*Store, *testClock, string) {
	t.Helper()
	dsn := mytest.DSN(t)
	clock := &testClock{}
	s, err := Open(t.Context(), dsn, Options{Now: clock.now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return s, clock, dsn
}

// inTx is the harness's in-transaction claim: it begins a transaction on
// the Store's database, claims in it, and commits when fn succeeded and
// the verdict is Execute; otherwise it rolls back (the claim may have
// rolled it back already).
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
	s, clock, dsn := openTest(t)
	db := s.DB()
	return &registrytest.Harness{
		Name:  "mysql",
		Store: s,
		Sealed: func(t *testing.T, sealer registry.Sealer) registry.Store {
			st, err := Open(t.Context(), dsn, Options{Sealer: sealer})
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
			_, err := exec(ctx, db, query, args...)
			return err
		},
		QueryInt: func(ctx context.Context, query string, args ...any) (int64, error) {
			var n int64
			err := queryRow(ctx, db, query, args...).Scan(&n)
			return n, err
		},
		SetNow: clock.set,
		FailClaims: func(ctx context.Context, operation string) error {
			// A BEFORE INSERT trigger that refuses the operation's claims:
			// a database error that is not a duplicate key.
			name := fmt.Sprintf("conformance_fail_%d", failTrigger.Add(1))
			_, err := exec(ctx, db, "CREATE TRIGGER "+name+` BEFORE INSERT ON idem_operations FOR EACH ROW
BEGIN
    IF NEW.operation = `+quote(operation)+` THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'conformance: claim refused';
    END IF;
END`)
			return err
		},
		DropGuards: func(ctx context.Context) error {
			rows, err := db.QueryContext(ctx, `SELECT trigger_name FROM information_schema.triggers
WHERE trigger_schema = DATABASE() AND event_object_table IN ('idem_operations', 'idem_effects')`)
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
			if err := rows.Close(); err != nil {
				return err
			}
			for _, n := range names {
				if _, err := db.ExecContext(ctx, "DROP TRIGGER `"+n+"`"); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// quote is a MySQL string literal of s (test helper: s is a test's own
// operation name).
func quote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			out = append(out, '\'', '\'')
		case '\\':
			out = append(out, '\\', '\\')
		default:
			out = append(out, s[i])
		}
	}
	return string(append(out, '\''))
}
