package idempg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestAcceptanceLane holds every connection of the main pool, as business
// transactions of other requests would, and checks that the acceptance
// point still answers through its lane — and, with the lane off, that it
// does not.
func TestAcceptanceLane(t *testing.T) {
	for _, tc := range []struct {
		name      string
		laneConns int
		wantWait  bool
	}{
		{"lane", 0, false},
		{"no lane", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Open(t.Context(), pgtest.DSN(t)+"&pool_max_conns=1", Options{LaneConns: tc.laneConns})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			held, err := st.Pool().Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()

			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			c := newClaim("lane.test")
			rec, created, err := st.Reserve(ctx, c)
			if tc.wantWait {
				if !errors.Is(err, registry.ErrUnavailable) {
					t.Fatalf("Reserve without a lane, main pool held: %v, want it to wait until ctx ends (ErrUnavailable)", err)
				}
				return
			}
			if err != nil || !created {
				t.Fatalf("Reserve through the lane, main pool held: created %v, %v", created, err)
			}
			if got, err := st.Get(ctx, c.Scope); err != nil || got.OperationID != rec.OperationID {
				t.Fatalf("Get through the lane: %v %v", got.OperationID, err)
			}
			if _, err := st.GetByID(ctx, rec.OperationID); err != nil {
				t.Fatalf("GetByID through the lane: %v", err)
			}
			if err := st.Release(ctx, rec); err != nil {
				t.Fatalf("Release through the lane: %v", err)
			}
		})
	}
}

// TestConnectionTakenAtFirstStatement: Complete and ExecuteOnce take their
// connection from the main pool only when the business function sends its
// first statement, so the handler's work before it holds none. With a
// pool of one, a business function that needs the pool for something
// else before its first statement would wait out its context if the
// connection were taken up front; then the failure to begin is storage
// trouble (ErrUnavailable), whatever the function returns.
func TestConnectionTakenAtFirstStatement(t *testing.T) {
	st, err := Open(t.Context(), pgtest.DSN(t)+"&pool_max_conns=1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	usePoolFirst := func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		if err := st.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
			_, err := tx.Exec(ctx, `SELECT 1`)
			return err
		}); err != nil {
			return registry.Outcome{}, err
		}
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			return registry.Outcome{}, err
		}
		return benchOutcome, nil
	}
	c := newClaim("lazy.conn")
	if res, err := st.ExecuteOnce(ctx, c, usePoolFirst); err != nil || res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce: %v %v", res.Verdict, err)
	}
	c2 := newClaim("lazy.conn")
	rec, _, err := st.Reserve(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Complete(ctx, rec, usePoolFirst); err != nil {
		t.Fatalf("Complete: %v", err)
	}

	// The pool is held elsewhere: the function's first statement cannot
	// begin, and the call reports ErrUnavailable although the function
	// swallowed its statement's error and returned an outcome.
	held, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	swallow := func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		_, _ = tx.Exec(ctx, `SELECT 1`)
		return benchOutcome, nil
	}
	if _, err := st.ExecuteOnce(short, newClaim("lazy.conn"), swallow); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("ExecuteOnce with the pool held: %v, want ErrUnavailable", err)
	}
}
