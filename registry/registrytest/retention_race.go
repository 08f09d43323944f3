package registrytest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// pruneObs is one Reserve of testPruneRetryRace, in the order the
// goroutine made them.
type pruneObs struct {
	scope   int
	seq     int
	opID    string
	created bool
	verdict registry.Verdict
	same    bool // the replayed response is the stored one
	err     error
}

// testPruneRetryRace: retries race concurrent prunes on expired scopes
// while the clock jumps past the tombstones' deletion time. Checked over
// the recorded history: a scope whose tombstone is kept forever is never
// created again — every Reserve gets the original operation, replayed
// whole or as a tombstone, and a goroutine that saw the tombstone never
// sees the response again; a scope with a TombstoneTTL gets at most one new
// operation, only after its tombstone was deleted, and a goroutine never
// goes back from the new operation to the old one.
func testPruneRetryRace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const (
		keptScopes, freeScopes = 4, 2
		reservers, pruners     = 20, 3
		rounds                 = 12
	)
	e.setNow(base)
	var claims []registry.Claim
	var originals []registry.Record
	out := outcome("race", 1)
	for i := range keptScopes + freeScopes {
		ttl := time.Duration(0)
		if i >= keptScopes {
			ttl = time.Minute
		}
		c := e.expiring("conformance.prune-race", ttl)
		claims = append(claims, c)
		originals = append(originals, e.complete(e.reserve(c), out))
	}
	// Every random choice is drawn here, from the case's seed.
	picks := make([][]int, reservers)
	for i := range picks {
		for range rounds {
			picks[i] = append(picks[i], e.rng.IntN(len(claims)))
		}
	}
	jumpAfter := 1 + e.rng.IntN(4) // prunes by pruner 0 before the clock first jumps
	e.setNow(base.Add(2 * retentionPeriod))

	hist := make([][]pruneObs, reservers)
	var pruneErrs []error
	var mu sync.Mutex
	var retired, deleted atomic.Int64
	stop := make(chan struct{})
	jumped := make(chan struct{}) // pruner 0 pruned a few times after the last jump
	var prunersDone sync.WaitGroup
	for p := range pruners {
		prunersDone.Go(func() {
			for n := 0; ; n++ {
				switch { // past the TTL of tombstones retired before each jump
				case p == 0 && n == jumpAfter:
					e.setNow(base.Add(2*retentionPeriod + 2*time.Minute))
				case p == 0 && n == jumpAfter+3:
					e.setNow(base.Add(3 * retentionPeriod))
				}
				if p == 0 && n == jumpAfter+6 {
					close(jumped)
				}
				res, err := e.h.Store.Prune(e.ctx, 2)
				if err != nil {
					mu.Lock()
					pruneErrs = append(pruneErrs, err)
					mu.Unlock()
				}
				retired.Add(int64(res.Retired))
				deleted.Add(int64(res.Deleted))
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	race(reservers, func(i int) {
		// At least rounds retries each, and on (cycling through the picks)
		// until the clock jumps are behind pruner 0, so retries race every
		// stage: whole record, tombstone, deletion.
		for seq := 0; seq < rounds || (!closed(jumped) && seq < 50*rounds); seq++ {
			if seq >= rounds {
				time.Sleep(200 * time.Microsecond) // leave the pruners room on SQLite's single writer
			}
			k := picks[i][seq%rounds]
			c := claims[k]
			rec, created, err := e.h.Store.Reserve(e.ctx, c)
			o := pruneObs{scope: k, seq: seq, opID: rec.OperationID, created: created, err: err,
				verdict: registry.Decide(rec, created, c.Fingerprint)}
			o.same = o.verdict == registry.Replay && sameResponse(rec.Response, out.Response)
			hist[i] = append(hist[i], o)
		}
	})
	close(stop)
	prunersDone.Wait()
	n := 0
	for _, h := range hist {
		n += len(h)
	}
	t.Logf("%d retired, %d deleted by %d pruners during %d retries (clock jumps after %d and %d prunes)",
		retired.Load(), deleted.Load(), pruners, n, jumpAfter, jumpAfter+3)
	for _, err := range pruneErrs {
		t.Errorf("Prune: %v", err)
	}

	created := make([]string, len(claims)) // the new operation of each scope, if any
	for i, h := range hist {
		seen := make([]int, len(claims)) // 0 replayed, 1 retired, 2 new operation
		for _, o := range h {
			fail := func(format string, args ...any) {
				t.Errorf("reserver %d, retry %d on scope %d (%s): %s", i, o.seq, o.scope,
					originals[o.scope].OperationID, fmt.Sprintf(format, args...))
			}
			stage := -1
			switch {
			case o.err != nil:
				fail("Reserve: %v", o.err)
				continue
			case o.created:
				if o.scope < keptScopes {
					fail("created a new operation %s while the tombstone is kept forever", o.opID)
				} else if created[o.scope] != "" {
					fail("created a second new operation %s after %s", o.opID, created[o.scope])
				}
				created[o.scope], stage = o.opID, 2
			case o.opID == originals[o.scope].OperationID && o.verdict == registry.Replay:
				stage = 0
				if !o.same {
					fail("replay of a response that is not the stored one")
				}
			case o.opID == originals[o.scope].OperationID && o.verdict == registry.Retired:
				stage = 1
			case o.scope >= keptScopes && o.verdict == registry.InProgress:
				stage = 2 // the new operation, reserved by another retry
			default:
				fail("got %s with verdict %v, want the original's replay or tombstone", o.opID, o.verdict)
				continue
			}
			if stage < seen[o.scope] {
				fail("went back to stage %d after stage %d (replay, tombstone, new operation)", stage, seen[o.scope])
			}
			seen[o.scope] = max(seen[o.scope], stage)
		}
	}
	for i, h := range hist {
		for _, o := range h {
			if o.verdict == registry.InProgress && o.opID != created[o.scope] {
				t.Errorf("reserver %d saw %s in progress on scope %d, but the new operation is %q", i, o.opID, o.scope, created[o.scope])
			}
		}
	}
	// Settle: every tombstone kept forever is there, with its one effect.
	if _, err := registry.PruneAll(e.ctx, e.h.Store, 3, nil); err != nil {
		t.Fatalf("PruneAll: %v", err)
	}
	for k := range keptScopes {
		rec, err := e.h.Store.Get(e.ctx, claims[k].Scope)
		if err != nil || !rec.Retired() || rec.Response != nil || rec.OperationID != originals[k].OperationID ||
			rec.State != originals[k].State || e.count(countTombstone, claims[k].Scope[:]) != 1 {
			t.Errorf("scope %d after the race: %s %s retired %v err %v, want the tombstone of %s",
				k, rec.OperationID, rec.State, rec.Retired(), err, originals[k].OperationID)
		}
		if n := e.effects(originals[k].OperationID); n != 1 {
			t.Errorf("scope %d: %d business rows, want 1", k, n)
		}
	}
}
