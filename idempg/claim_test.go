package idempg

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/idemkit/idem/registry"
)

// TestOnceDuplicateWaitsOnClaim: a duplicate of an ExecuteOnce whose
// transaction is still open (another process's, here another Store on the
// same database) waits on the claim, and its business statements never
// run — the sequence a business statement advances (sequences are not
// rolled back) moves once — then it gets the committed record's verdict;
// when the first rolled back instead, the duplicate executes.
func TestOnceDuplicateWaitsOnClaim(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			first := openStore(t, "")
			other, err := Open(ctx, first.dsn, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := first.Pool().Exec(ctx, `CREATE SEQUENCE business_statements`); err != nil {
				t.Fatal(err)
			}
			business := func(ctx context.Context, tx registry.Tx) error {
				var n int64
				return tx.QueryRow(ctx, `SELECT nextval('business_statements')`).Scan(&n)
			}
			c := newClaim("claim.wait")
			claimed, release := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			releaseOnce := sync.OnceFunc(func() { close(release) })
			defer wg.Wait()
			defer releaseOnce() // also when the test fails before it released the first
			var won registry.Result
			var wonErr error
			wg.Go(func() {
				won, wonErr = first.ExecuteOnce(ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
					err := business(ctx, tx)
					close(claimed)
					<-release
					if err == nil && !commit {
						err = fmt.Errorf("the first rolls back")
					}
					return succeeded("first"), err
				})
			})
			<-claimed
			var dup registry.Result
			var dupErr, dupStmt error
			statements := 0
			wg.Go(func() {
				dup, dupErr = other.ExecuteOnce(ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
					statements++
					dupStmt = business(ctx, tx)
					return succeeded("duplicate"), dupStmt
				})
			})
			waitLockWaiters(t, first, 1)
			releaseOnce()
			wg.Wait()
			var ran int64
			if err := first.Pool().QueryRow(ctx, `SELECT last_value FROM business_statements`).Scan(&ran); err != nil {
				t.Fatal(err)
			}
			if commit {
				if wonErr != nil || won.Verdict != registry.Execute {
					t.Fatalf("first: %v %v", won.Verdict, wonErr)
				}
				if dupErr != nil || dup.Verdict != registry.Replay || dup.Record.OperationID != won.Record.OperationID {
					t.Fatalf("duplicate: %v on %s (%v), want a replay of %s", dup.Verdict, dup.Record.OperationID, dupErr, won.Record.OperationID)
				}
				if ran != 1 || dupStmt == nil {
					t.Errorf("business statements run: %d (the duplicate's answered %v), want 1: the duplicate's must not run", ran, dupStmt)
				}
				return
			}
			if wonErr == nil {
				t.Fatalf("first: %v, want its error", won.Verdict)
			}
			if dupErr != nil || dup.Verdict != registry.Execute || dupStmt != nil || statements != 1 || ran != 2 {
				t.Errorf("after the first rolled back, the duplicate: %v (%v), statement %v, statements run %d, want it executed (2)", dup.Verdict, dupErr, dupStmt, ran)
			}
		})
	}
}
