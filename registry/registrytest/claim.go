package registrytest

import (
	"context"
	"sync"
	"testing"

	"github.com/idemkit/idem/registry"
)

// testOnceDuplicateWaitsForClaim: the one-transaction style claims the
// scope before the business function's statements run. A duplicate
// started while the first call's transaction is open — its business row
// written, not committed — never gets a business statement through:
// either its function is not called, or its first statement fails; it
// then replays the first call's record. (Whether the duplicate already
// waits when the first commits is up to the scheduler; the property
// holds either way, and without a claim it fails either way: the
// duplicate's statement would then succeed before its insert lost.)
func testOnceDuplicateWaitsForClaim(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.once-claim")
	out := outcome("once-claim", 1)
	wrote, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var first onceObs
	wg.Go(func() {
		first = e.once(c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			o, err := effect("first", out)(ctx, tx, rec)
			close(wrote)
			<-release
			return o, err
		})
	})
	<-wrote
	var dup onceObs
	var mu sync.Mutex
	var through []string // the duplicate's business statements that succeeded
	wg.Go(func() {
		dup = e.once(c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			o, err := effect("duplicate", out)(ctx, tx, rec)
			if err == nil {
				mu.Lock()
				through = append(through, rec.OperationID)
				mu.Unlock()
			}
			return o, err
		})
	})
	close(release)
	wg.Wait()
	if first.err != nil || first.res.Verdict != registry.Execute {
		t.Fatalf("first: %v %v, want execute", first.res.Verdict, first.err)
	}
	if dup.err != nil || dup.res.Verdict != registry.Replay || dup.res.Record.OperationID != first.res.Record.OperationID {
		t.Fatalf("duplicate: %v on %s (%v), want a replay of %s", dup.res.Verdict, dup.res.Record.OperationID, dup.err, first.res.Record.OperationID)
	}
	if len(through) != 0 {
		t.Errorf("the duplicate's business statement went through (%v); the claim must stop it before it runs", through)
	}
	if n := e.count(countAllEffects); n != 1 {
		t.Errorf("%d business rows, want the first call's 1", n)
	}
}
