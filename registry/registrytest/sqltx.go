package registrytest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// sqlTxStyle is one execution style, as testSQLTx runs it.
type sqlTxStyle struct {
	name string
	// run runs fn in the style for c; it returns the result where the
	// style has one.
	run func(e *env, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error)
	// leavesReservation says whether a failed run leaves a record (the
	// two-phase style's reservation stays RESERVED); keeps says whether
	// the style keeps a record at all (InTx does not).
	leavesReservation, keeps bool
}

func sqlTxStyles(e *env) []sqlTxStyle {
	cae := e.h.ClaimAndExecute
	if e.h.ClaimAndExecuteSQL != nil {
		cae = e.h.ClaimAndExecuteSQL
	}
	return []sqlTxStyle{
		{name: "TwoPhase", leavesReservation: true, keeps: true,
			run: func(e *env, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
				rec, created, err := e.h.Store.Reserve(e.ctx, c)
				if err != nil {
					return registry.Result{}, err
				}
				if v := registry.Decide(rec, created, c.Fingerprint); v != registry.Execute {
					return registry.Result{Verdict: v, Record: rec}, nil
				}
				done, err := e.h.Store.Complete(e.ctx, rec, fn)
				return registry.Result{Verdict: registry.Execute, Record: done}, err
			}},
		{name: "OneTransaction", keeps: true,
			run: func(e *env, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
				return e.h.Store.ExecuteOnce(e.ctx, c, fn)
			}},
		{name: "InTransaction", keeps: true,
			run: func(e *env, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
				return cae(e.ctx, c, fn)
			}},
		{name: "Plain",
			run: func(e *env, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
				rec := registry.Record{OperationID: idem.NewOperationID(time.Now(), idem.ScopeHash{})}
				var out registry.Outcome
				err := e.h.Store.InTx(e.ctx, func(ctx context.Context, tx registry.Tx) error {
					var err error
					out, err = fn(ctx, tx, rec)
					return err
				})
				rec.State = out.State
				return registry.Result{Verdict: registry.Execute, Record: rec}, err
			}},
	}
}

// sqlTxWrite is a business function that writes one conformance_effects
// row through the *sql.Tx of registry.SQLTx (no placeholders, which
// differ by engine: the operation ID is safe to inline) and one through
// tx itself, checks that asking twice gives the same *sql.Tx, and then
// returns out, or fail if it is not nil.
func sqlTxWrite(ran *string, out registry.Outcome, fail error) registry.BusinessFunc {
	return func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		*ran = rec.OperationID
		stx, err := registry.SQLTx(tx)
		if err != nil {
			return registry.Outcome{}, err
		}
		if again, err := registry.SQLTx(tx); err != nil || again != stx {
			return registry.Outcome{}, errors.New("asking SQLTx twice did not return the same *sql.Tx")
		}
		res, err := stx.ExecContext(ctx, `INSERT INTO conformance_effects (operation_id, note) VALUES ('`+rec.OperationID+`', 'sqltx')`)
		if err != nil {
			return registry.Outcome{}, err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return registry.Outcome{}, errors.New("the *sql.Tx insert did not affect one row")
		}
		// The same transaction, seen from both sides.
		var seen int64
		if err := tx.QueryRow(ctx, countEffects, rec.OperationID).Scan(&seen); err != nil || seen != 1 {
			return registry.Outcome{}, errors.New("Tx does not see the row written through the *sql.Tx")
		}
		if _, err := tx.Exec(ctx, insertEffect, rec.OperationID, "tx"); err != nil {
			return registry.Outcome{}, err
		}
		if err := stx.QueryRowContext(ctx, `SELECT count(*) FROM conformance_effects WHERE operation_id = '`+rec.OperationID+`'`).Scan(&seen); err != nil || seen != 2 {
			return registry.Outcome{}, errors.New("the *sql.Tx does not see the row written through Tx")
		}
		return out, fail
	}
}

// testSQLTx: in every style, the business rows written through
// registry.SQLTx's *sql.Tx commit together with the outcome, and a
// business function's error leaves neither; a replay does not run the
// business function again.
//
// threat:sqltx-split-commit
func testSQLTx(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	for _, st := range sqlTxStyles(e) {
		t.Run(st.name, func(t *testing.T) {
			e := &env{t: t, h: e.h, ctx: e.ctx, rng: e.rng}

			// A business error: neither the rows nor an outcome.
			c := e.claim("sqltx-" + st.name)
			var ran string
			_, err := st.run(e, c, sqlTxWrite(&ran, outcome("sqltx-fail", 1), errBusiness))
			if !errors.Is(err, errBusiness) {
				t.Fatalf("failing business function: %v, want its error", err)
			}
			if ran == "" {
				t.Fatal("the business function did not run")
			}
			if n := e.effects(ran); n != 0 {
				t.Errorf("after a business error, %d rows of the *sql.Tx and Tx committed, want 0", n)
			}
			if st.keeps {
				rec, err := e.h.Store.Get(e.ctx, c.Scope)
				switch {
				case st.leavesReservation && (err != nil || rec.State != idem.StateReserved):
					t.Errorf("after a business error the reservation is %v (%v), want RESERVED", rec.State, err)
				case !st.leavesReservation && !errors.Is(err, registry.ErrNotFound):
					t.Errorf("after a business error the record is %v (%v), want none", rec.State, err)
				}
				if n := e.outbox(ran); n != 0 {
					t.Errorf("after a business error %d outbox rows, want 0", n)
				}
			}

			// Success: both rows and the outcome, together.
			if st.leavesReservation {
				c = e.claim("sqltx-" + st.name) // the reservation stays until its lease ends
			}
			ran = ""
			res, err := st.run(e, c, sqlTxWrite(&ran, outcome("sqltx", 1), nil))
			if err != nil || res.Verdict != registry.Execute {
				t.Fatalf("run: %v %v", res.Verdict, err)
			}
			if n := e.effects(ran); n != 2 {
				t.Errorf("%d business rows committed, want 2 (one through the *sql.Tx, one through Tx)", n)
			}
			if !st.keeps {
				return
			}
			rec, err := e.h.Store.Get(e.ctx, c.Scope)
			if err != nil || rec.State != idem.StateSucceeded || rec.OperationID != ran {
				t.Fatalf("record after the run: %v %s (%v), want SUCCEEDED %s", rec.State, rec.OperationID, err, ran)
			}
			if n := e.outbox(ran); n != 1 {
				t.Errorf("%d outbox rows, want 1", n)
			}

			// A replay: the stored outcome, and no statement of the business
			// function has effect (ExecuteOnce may call it, and then its
			// first statement fails: OnceDuplicateWaitsForClaim).
			again := ""
			res, err = st.run(e, c, sqlTxWrite(&again, outcome("sqltx-again", 1), nil))
			if err != nil || res.Verdict != registry.Replay || res.Record.OperationID != ran {
				t.Errorf("replay: verdict %v of %s, err %v; want replay of %s", res.Verdict, res.Record.OperationID, err, ran)
			}
			if n := e.effects(ran); n != 2 {
				t.Errorf("after the replay %d business rows, want 2", n)
			}
			if again != "" && again != ran {
				if n := e.effects(again); n != 0 {
					t.Errorf("the replay's business function wrote %d rows", n)
				}
			}
		})
	}
}

// testSQLTxEnded: a business function that rolls its *sql.Tx back gets
// no outcome recorded, and nothing it wrote commits.
func testSQLTxEnded(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("sqltx-ended")
	rec := e.reserve(c)
	_, err := e.h.Store.Complete(e.ctx, rec, func(ctx context.Context, tx registry.Tx, r registry.Record) (registry.Outcome, error) {
		stx, err := registry.SQLTx(tx)
		if err != nil {
			return registry.Outcome{}, err
		}
		if _, err := stx.ExecContext(ctx, `INSERT INTO conformance_effects (operation_id, note) VALUES ('`+r.OperationID+`', 'ended')`); err != nil {
			return registry.Outcome{}, err
		}
		if err := stx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			return registry.Outcome{}, err
		}
		return outcome("ended", 0), nil
	})
	if err == nil {
		t.Fatal("Complete recorded an outcome after the business function rolled its *sql.Tx back")
	}
	if n := e.effects(rec.OperationID); n != 0 {
		t.Errorf("%d business rows committed after the rollback, want 0", n)
	}
	got, err := e.h.Store.Get(e.ctx, c.Scope)
	if err != nil || got.State != idem.StateReserved {
		t.Errorf("record %v (%v), want still RESERVED", got.State, err)
	}
}

// testSQLTxCommitRefused: the business code cannot commit its *sql.Tx
// ahead of the outcome, in the styles where the store owns the
// transaction: Commit fails with registry.ErrTxOwned and rolls back, and
// the call records nothing — neither the rows written through the
// *sql.Tx nor, in the one-transaction style, the claim; and a write the
// business code sends through the store's transaction afterwards fails
// instead of committing on its own.
//
// threat:sqltx-split-commit
func testSQLTxCommitRefused(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	for _, st := range sqlTxStyles(e) {
		if st.name == "InTransaction" {
			continue // the caller owns and commits that transaction
		}
		t.Run(st.name, func(t *testing.T) {
			e := &env{t: t, h: e.h, ctx: e.ctx, rng: e.rng}
			c := e.claim("sqltx-commit-" + st.name)
			var ran string
			var commitErr, afterErr error
			_, err := st.run(e, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
				ran = rec.OperationID
				stx, err := registry.SQLTx(tx)
				if err != nil {
					return registry.Outcome{}, err
				}
				if _, err := stx.ExecContext(ctx, `INSERT INTO conformance_effects (operation_id, note) VALUES ('`+rec.OperationID+`', 'commit')`); err != nil {
					return registry.Outcome{}, err
				}
				commitErr = stx.Commit()
				// A careless business function goes on writing through the
				// store's transaction: that write must not commit on its own
				// either (the *sql.Tx's Commit ended the transaction).
				afterErr = tx.QueryRow(ctx, `INSERT INTO conformance_effects (operation_id, note) VALUES ('`+rec.OperationID+`', 'after') RETURNING note`).Scan(new(string))
				return outcome("commit", 1), nil
			})
			if !errors.Is(commitErr, registry.ErrTxOwned) {
				t.Errorf("Commit of the *sql.Tx: %v, want ErrTxOwned", commitErr)
			}
			if err == nil {
				t.Error("the call succeeded after the business function committed its *sql.Tx")
			}
			if afterErr == nil {
				t.Error("a write through the store's transaction after the *sql.Tx's Commit succeeded")
			}
			if n := e.effects(ran); n != 0 {
				t.Errorf("%d business rows committed, want 0", n)
			}
			if !st.keeps {
				return
			}
			rec, err := e.h.Store.Get(e.ctx, c.Scope)
			switch {
			case st.leavesReservation && (err != nil || rec.State != idem.StateReserved):
				t.Errorf("the reservation is %v (%v), want still RESERVED", rec.State, err)
			case !st.leavesReservation && !errors.Is(err, registry.ErrNotFound):
				t.Errorf("a record %v (%v) was left, want none", rec.State, err)
			}
		})
	}
}
