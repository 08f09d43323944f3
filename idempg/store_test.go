package idempg

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/registry/registrytest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformance(t *testing.T) { registrytest.Run(t, newHarness) }

// failClaimsTimeout is the statement timeout of the harness's native
// transactions once FailClaims has been called: the injected trigger
// sleeps far longer, so the claim insert fails with query_canceled.
const failClaimsTimeout = "250ms"

// testStore is a Store on a fresh database, with its clock under the
// test's control.
type testStore struct {
	*Store
	now atomic.Pointer[time.Time] // nil or zero: database time
	dsn string                    // the database it is open on
}

// setNow injects t as the store's "now"; the zero time restores database
// time.
func (ts *testStore) setNow(t time.Time) { ts.now.Store(&t) }

// openStore opens a Store on a fresh database (dsnSuffix is appended to
// the DSN's query string) and closes it when t ends.
func openStore(t testing.TB, dsnSuffix string) *testStore {
	t.Helper()
	ts := &testStore{dsn: pgtest.DSN(t) + dsnSuffix}
	st, err := Open(t.Context(), ts.dsn, Options{Now: func() time.Time {
		if p := ts.now.Load(); p != nil {
			return *p
		}
		return time.Time{}
	}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(st.Close)
	ts.Store = st
	return ts
}

// newHarness is the conformance suite's view of a fresh testStore.
func newHarness(t *testing.T) *registrytest.Harness {
	ts := openStore(t, "")
	var failArmed atomic.Bool
	return &registrytest.Harness{
		Name:  "postgres",
		Store: ts.Store,
		Sealed: func(t *testing.T, sealer registry.Sealer) registry.Store {
			st, err := Open(t.Context(), ts.dsn, Options{Sealer: sealer})
			if err != nil {
				t.Fatalf("Open with a sealer: %v", err)
			}
			t.Cleanup(st.Close)
			return st
		},
		ClaimAndExecute: func(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
			return claimAndExecute(ctx, ts.Store, failArmed.Load(), c, fn)
		},
		ClaimAndExecuteSQL: func(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
			return claimAndExecuteSQL(ctx, ts.Store, c, fn)
		},
		Exec: func(ctx context.Context, sql string, args ...any) error {
			_, err := ts.Pool().Exec(ctx, sql, args...)
			return err
		},
		QueryInt: func(ctx context.Context, sql string, args ...any) (int64, error) {
			var n int64
			err := ts.Pool().QueryRow(ctx, sql, args...).Scan(&n)
			return n, err
		},
		SetNow: ts.setNow,
		DropGuards: func(ctx context.Context) error {
			_, err := ts.Pool().Exec(ctx, `ALTER TABLE idem_operations DISABLE TRIGGER USER`)
			if err == nil {
				_, err = ts.Pool().Exec(ctx, `ALTER TABLE idem_effects DISABLE TRIGGER USER`)
			}
			return err
		},
		FailClaims: func(ctx context.Context, operation string) error {
			failArmed.Store(true)
			return failClaims(ctx, ts.Store, operation)
		},
	}
}

// claimAndExecute is the harness's in-transaction style: it begins a
// transaction on the store's pool, runs Store.ClaimAndExecute and commits
// when fn ran and the verdict is Execute, else rolls back. With timeout
// set, the transaction's statements are limited to failClaimsTimeout.
func claimAndExecute(ctx context.Context, st *Store, timeout bool, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		return registry.Result{}, err
	}
	defer tx.Rollback(ctx) // no-op once committed or rolled back
	if timeout {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '"+failClaimsTimeout+"'"); err != nil {
			return registry.Result{}, err
		}
	}
	res, err := st.ClaimAndExecute(ctx, tx, c, fn)
	if err != nil || res.Verdict != registry.Execute {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return registry.Result{}, err
	}
	return res, nil
}

// claimAndExecuteSQL is claimAndExecute on a *sql.Tx of pgx's stdlib
// driver over the Store's pool (ClaimAndExecuteSQL).
func claimAndExecuteSQL(ctx context.Context, st *Store, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	db := stdlib.OpenDBFromPool(st.Pool())
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return registry.Result{}, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op once committed or rolled back
	res, err := st.ClaimAndExecuteSQL(ctx, tx, c, fn)
	if err != nil || res.Verdict != registry.Execute {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return registry.Result{}, err
	}
	return res, nil
}

// failClaims makes every later claim insert for operation sleep well past
// failClaimsTimeout, through a trigger that looks the operation up in a
// test table.
func failClaims(ctx context.Context, st *Store, operation string) error {
	_, err := st.Pool().Exec(ctx, `
CREATE TABLE IF NOT EXISTS idem_test_fail_claims (operation text PRIMARY KEY);
CREATE OR REPLACE FUNCTION idem_test_fail_claims() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM idem_test_fail_claims WHERE operation = NEW.operation) THEN
        PERFORM pg_sleep(30);
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER idem_test_fail_claims BEFORE INSERT ON idem_operations
    FOR EACH ROW EXECUTE FUNCTION idem_test_fail_claims();`)
	if err != nil {
		return err
	}
	_, err = st.Pool().Exec(ctx, `INSERT INTO idem_test_fail_claims VALUES ($1) ON CONFLICT DO NOTHING`, operation)
	return err
}
