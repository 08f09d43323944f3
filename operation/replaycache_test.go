package operation

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// settledFor returns a settled record of claim cl with a body of n bytes,
// expiring at exp.
func settledFor(cl registry.Claim, n int, exp time.Time) registry.Record {
	return registry.Record{
		Scope: cl.Scope, OperationID: "op_" + fmt.Sprint(cl.Scope[0]), Operation: cl.Operation, Owner: cl.Owner,
		TenantHash: registry.TenantHash(cl.Tenant), State: idem.StateSucceeded, ExpiresAt: exp,
		Response: &idem.Response{Status: 201, MediaType: "application/json", Body: make([]byte, n)},
	}
}

func claimFor(op string, i int) registry.Claim {
	id := idem.Identity{Tenant: "t", Principal: "p"}
	var s idem.ScopeHash
	s[0], s[1] = byte(i), byte(i>>8)
	return registry.Claim{Scope: s, Operation: op, Owner: registry.OwnerOf(id), Tenant: id.Tenant}
}

// TestReplayCacheBounds: the cache keeps at most Entries records and
// Bytes bytes, evicting the least recently used; a record larger than the
// byte bound, a tombstone, a record in flight or UNKNOWN, and one already
// within the margin of its expiry are never kept; the zero value is off.
func TestReplayCacheBounds(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	exp := now.Add(time.Hour)
	clock := func() time.Time { return now }
	if newReplayCache(ReplayCache{}) != nil {
		t.Fatal("the zero ReplayCache is not off")
	}
	rc := newReplayCache(ReplayCache{Entries: 3, Bytes: 3 * (replayEntryOverhead + 100 + 64), Now: clock})
	for i := range 3 {
		rc.put(settledFor(claimFor("op", i), 100, exp), claimFor("op", i))
	}
	if _, ok := rc.get(claimFor("op", 0)); !ok { // 0 is now the most recent
		t.Fatal("entry 0 not cached")
	}
	rc.put(settledFor(claimFor("op", 3), 100, exp), claimFor("op", 3))
	if _, ok := rc.get(claimFor("op", 1)); ok {
		t.Error("entry 1, the least recently used, was not evicted by the entry bound")
	}
	if s := rc.stats(); s.Entries != 3 {
		t.Errorf("entries %d, want 3", s.Entries)
	}
	rc.put(settledFor(claimFor("op", 4), 300, exp), claimFor("op", 4))
	if s := rc.stats(); s.Bytes > 3*(replayEntryOverhead+100+64) || s.Entries >= 3 {
		t.Errorf("after a large entry: %+v, want the byte bound kept by evicting", s)
	}
	rc.put(settledFor(claimFor("op", 5), 10_000, exp), claimFor("op", 5))
	if _, ok := rc.get(claimFor("op", 5)); ok {
		t.Error("a record larger than the byte bound was cached")
	}
	tomb := settledFor(claimFor("op", 6), 10, exp)
	tomb.RetiredAt, tomb.Response = now, nil
	unknown := settledFor(claimFor("op", 7), 10, exp)
	unknown.State = idem.StateUnknown
	late := settledFor(claimFor("op", 8), 10, now.Add(DefaultReplayCacheMargin/2))
	for i, rec := range map[int]registry.Record{6: tomb, 7: unknown, 8: late} {
		rc.put(rec, claimFor("op", i))
		if _, ok := rc.get(claimFor("op", i)); ok {
			t.Errorf("record %d (%s, retired %v, expiring %v) was cached", i, rec.State, rec.Retired(), rec.ExpiresAt)
		}
	}
}

// TestReplayCacheDigest: an entry whose response no longer matches the
// digest taken when it was cached (memory changed under it) is dropped,
// never served; the caller reads the registry instead.
// threat:replay-cache-corrupt-entry
func TestReplayCacheDigest(t *testing.T) {
	rc := newReplayCache(ReplayCache{Entries: 10})
	cl := claimFor("op", 1)
	rc.put(settledFor(cl, 16, time.Now().Add(time.Hour)), cl)
	if _, ok := rc.get(cl); !ok {
		t.Fatal("not cached")
	}
	rc.mu.Lock()
	rc.entries[cl.Scope].Value.(*replayEntry).rec.Response.Body[3] ^= 1
	rc.mu.Unlock()
	if rec, ok := rc.get(cl); ok {
		t.Fatalf("a changed entry was served: %q", rec.Response.Body)
	}
	if s := rc.stats(); s.Entries != 0 {
		t.Errorf("the changed entry was kept: %+v", s)
	}
}

// TestReplayCacheConcurrent: goroutines putting and getting over more
// scopes than the cache holds (run with -race) never get another scope's
// record, and the bounds hold throughout.
func TestReplayCacheConcurrent(t *testing.T) {
	rc := newReplayCache(ReplayCache{Entries: 8, Bytes: 8 * (replayEntryOverhead + 200)})
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 2000 {
				i := (g*7 + n) % 32
				cl := claimFor("op", i)
				if rec, ok := rc.get(cl); ok && rec.Scope != cl.Scope {
					t.Errorf("scope %d got scope %x's record", i, rec.Scope[:2])
					return
				}
				rc.put(settledFor(cl, 100, exp), cl)
				if s := rc.stats(); s.Entries > 8 || s.Bytes > 8*(replayEntryOverhead+200) {
					t.Errorf("bounds broken: %+v", s)
					return
				}
			}
		}()
	}
	wg.Wait()
}
