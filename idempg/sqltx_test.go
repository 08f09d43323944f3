package idempg

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// txIDs returns the server transaction and backend of tx's statements and
// of its *sql.Tx's.
func txIDs(ctx context.Context, tx registry.Tx) (viaTx, viaSQL [2]int64, err error) {
	stx, err := registry.SQLTx(tx)
	if err != nil {
		return viaTx, viaSQL, err
	}
	const q = `SELECT pg_current_xact_id()::text::bigint, pg_backend_pid()`
	if err := stx.QueryRowContext(ctx, q).Scan(&viaSQL[0], &viaSQL[1]); err != nil {
		return viaTx, viaSQL, err
	}
	err = tx.QueryRow(ctx, q).Scan(&viaTx[0], &viaTx[1])
	return viaTx, viaSQL, err
}

// TestSQLTxSameServerTransaction: the *sql.Tx of Complete's, ExecuteOnce's
// and InTx's Tx runs on the same backend and in the same server
// transaction as idem's own statements, and a call that never asks for
// it does not touch the Store's *sql.DB (the pipelined path is kept).
//
// threat:sqltx-split-commit
func TestSQLTxSameServerTransaction(t *testing.T) {
	ts := openStore(t, "")
	ctx := t.Context()
	if _, err := ts.Pool().Exec(ctx, createPayments); err != nil {
		t.Fatal(err)
	}
	check := func(name string, viaTx, viaSQL [2]int64) {
		t.Helper()
		if viaTx != viaSQL || viaTx[0] == 0 {
			t.Errorf("%s: Tx runs in transaction %d on backend %d, the *sql.Tx in %d on %d; want the same",
				name, viaTx[0], viaTx[1], viaSQL[0], viaSQL[1])
		}
	}
	asks := func(name string) registry.BusinessFunc {
		return func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			a, b, err := txIDs(ctx, tx)
			if err != nil {
				return registry.Outcome{}, err
			}
			check(name, a, b)
			return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, Body: []byte("{}")}}, nil
		}
	}
	rec, _, err := ts.Reserve(ctx, newClaim("sqltx.same"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Complete(ctx, rec, asks("Complete")); err != nil {
		t.Fatal(err)
	}
	if res, err := ts.ExecuteOnce(ctx, newClaim("sqltx.same"), asks("ExecuteOnce")); err != nil || res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce: %v %v", res.Verdict, err)
	}
	err = ts.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		a, b, err := txIDs(ctx, tx)
		check("InTx", a, b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Three calls asked: three connections went through the *sql.DB and
	// back to the pool (it keeps none idle).
	if n := ts.sqlDB.Stats().MaxIdleClosed; n != 3 {
		t.Errorf("the Store's *sql.DB handed out %d connections for three calls that asked, want 3", n)
	}
	if _, err := ts.ExecuteOnce(ctx, newClaim("sqltx.same"), pay); err != nil {
		t.Fatal(err)
	}
	if n := ts.sqlDB.Stats().MaxIdleClosed; n != 3 {
		t.Errorf("a call that did not ask for a *sql.Tx went through the *sql.DB (%d connections, want 3)", n)
	}
}

// TestSQLTxAskedLate: after a statement through Complete's or
// ExecuteOnce's Tx, the connection is not one of the *sql.DB's and SQLTx
// fails with ErrNoSQLTx; so does a caller's pgx.Tx (ClaimAndExecute).
// InTx's connection always is one.
func TestSQLTxAskedLate(t *testing.T) {
	ts := openStore(t, "")
	ctx := t.Context()
	late := func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			return registry.Outcome{}, err
		}
		_, err := registry.SQLTx(tx)
		return registry.Outcome{}, err
	}
	rec, _, err := ts.Reserve(ctx, newClaim("sqltx.late"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Complete(ctx, rec, late); !errors.Is(err, registry.ErrNoSQLTx) {
		t.Errorf("Complete: SQLTx after a statement: %v, want ErrNoSQLTx", err)
	}
	if _, err := ts.ExecuteOnce(ctx, newClaim("sqltx.late"), late); !errors.Is(err, registry.ErrNoSQLTx) {
		t.Errorf("ExecuteOnce: SQLTx after a statement: %v, want ErrNoSQLTx", err)
	}
	err = ts.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		_, err := late(ctx, tx, registry.Record{})
		return err
	})
	if err != nil {
		t.Errorf("InTx: SQLTx after a statement: %v, want a *sql.Tx", err)
	}
	_, err = claimAndExecute(ctx, ts.Store, false, newClaim("sqltx.late"), func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		_, err := registry.SQLTx(tx)
		return registry.Outcome{}, err
	})
	if !errors.Is(err, registry.ErrNoSQLTx) {
		t.Errorf("SQLTx of a caller's pgx.Tx: %v, want ErrNoSQLTx", err)
	}
}

// BenchmarkSQLTx runs ExecuteOnce and Complete with the same insert made
// through Tx (its BEGIN, and ExecuteOnce's claim, ride with the insert)
// and through the *sql.Tx of registry.SQLTx (BEGIN and the claim are sent
// alone first), side by side in one run (docs/benchmarks.md).
func BenchmarkSQLTx(b *testing.B) {
	paySQL := func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		stx, err := registry.SQLTx(tx)
		if err != nil {
			return registry.Outcome{}, err
		}
		if _, err := stx.ExecContext(ctx, insertPayment, rec.OperationID, "10.00"); err != nil {
			return registry.Outcome{}, err
		}
		return benchOutcome, nil
	}
	for _, v := range []struct {
		name string
		fn   registry.BusinessFunc
	}{{"Tx", pay}, {"SQLTx", paySQL}} {
		b.Run("ExecuteOnce/"+v.name, func(b *testing.B) {
			eachWorkers(b, func(b *testing.B, ts *testStore, workers int) {
				runWorkers(b, ts, workers, func(ctx context.Context, _ int64) error {
					res, err := ts.ExecuteOnce(ctx, newClaim("bench.pay"), v.fn)
					if err == nil && res.Verdict != registry.Execute {
						err = fmt.Errorf("verdict %v, want execute", res.Verdict)
					}
					return err
				})
			})
		})
		b.Run("TwoPhase/"+v.name, func(b *testing.B) {
			eachWorkers(b, func(b *testing.B, ts *testStore, workers int) {
				runWorkers(b, ts, workers, func(ctx context.Context, _ int64) error {
					rec, created, err := ts.Reserve(ctx, newClaim("bench.pay"))
					if err != nil || !created {
						return fmt.Errorf("Reserve: created %v err %v", created, err)
					}
					_, err = ts.Complete(ctx, rec, v.fn)
					return err
				})
			})
		})
	}
}
