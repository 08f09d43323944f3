package registrytest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Cases of the operation core's replay cache (operation.ReplayCache) over
// this driver: a cached answer is the registry's answer, and whatever
// makes the registry stop serving a record — its retirement by Prune in
// another instance, a key ring without its key — stops the cache too
// (docs/contract.md §8, "Replays from memory").

// cacheMargin is the clock skew the cores of these cases tolerate.
const cacheMargin = 10 * time.Second

// cacheEnv is one instance: an operation core with the replay cache on,
// over its own Store of the case's database, and a clock the test moves.
type cacheEnv struct {
	e     *env
	core  *operation.Core
	now   atomic.Pointer[time.Time]
	calls atomic.Int64 // executions of the door
}

// instance starts an instance over st, running op in the given style.
func (e *env) instance(st registry.Store, op string, once bool) *cacheEnv {
	ce := &cacheEnv{e: e}
	start := time.Now()
	ce.now.Store(&start)
	cfg := &operation.Config{
		Name: op, APIRevision: "v1", Retention: retentionPeriod, OneTransaction: once,
		ReplayCache: operation.ReplayCache{Entries: 100, Margin: cacheMargin, Now: func() time.Time { return *ce.now.Load() }},
	}
	if err := cfg.Validate(); err != nil {
		e.t.Fatal(err)
	}
	ce.core = operation.NewCore(operation.Core{Store: st, Config: cfg, ResolveWait: -1})
	return ce
}

// set moves the instance's clock.
func (ce *cacheEnv) set(t time.Time) { ce.now.Store(&t) }

// request is a request of caller id with key k and fingerprint fp.
func (ce *cacheEnv) request(id idem.Identity, k string, fp idem.Fingerprint) operation.Request {
	key, err := idem.ParseKey([]string{k}, idem.KeyPolicy{})
	if err != nil {
		ce.e.t.Fatal(err)
	}
	return operation.Request{Identity: id, Scope: idem.ScopeOf(id, ce.core.Config.Name, "v1", key), Fingerprint: fp}
}

// run runs req; a first execution answers 201 with a body naming the
// caller and the key's operation ID.
func (ce *cacheEnv) run(req operation.Request) operation.Result {
	return ce.core.Run(ce.e.ctx, req, operation.ExecuteFunc(func(ctx context.Context, tx registry.Tx, rec registry.Record) (operation.Answer, error) {
		ce.calls.Add(1)
		body := fmt.Sprintf(`{"for":%q,"id":%q}`, req.Identity.Principal, rec.OperationID)
		return operation.Answer{State: idem.StateSucceeded, Status: 201,
			Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(body)}}, nil
	}))
}

// hits is the number of cache hits so far.
func (ce *cacheEnv) hits() int64 { return ce.core.ReplayCacheStats().Hits }

// wantReplay checks that res replays first's answer.
func (ce *cacheEnv) wantReplay(what string, res, first operation.Result) {
	ce.e.t.Helper()
	if res.Kind != operation.Replayed || res.Record.OperationID != first.Record.OperationID ||
		res.Record.Response == nil || string(res.Record.Response.Body) != string(first.Record.Response.Body) {
		ce.e.t.Fatalf("%s: %+v, want the replay of %s", what, res, first.Record.OperationID)
	}
}

// bothStyles runs f for the two-phase and the one-transaction style.
func bothStyles(t *testing.T, f func(t *testing.T, once bool)) {
	for _, once := range []bool{false, true} {
		t.Run(map[bool]string{false: "TwoPhase", true: "OneTransaction"}[once], func(t *testing.T) { f(t, once) })
	}
}

// testReplayCacheRetirementWins: instance A answers a key's replays from
// its cache; instance B, another Store on the same database, prunes the
// record once its expiry has come by the database's clock. A's next
// replay is 409 KEY_RETIRED, never the cached answer — also while A's
// clock is behind the database's by less than the margin (here half of
// it), the skew the cache tolerates — and no longer counts as a hit.
// threat:replay-cache-after-retirement
func testReplayCacheRetirementWins(t *testing.T, nh NewHarness) {
	bothStyles(t, func(t *testing.T, once bool) {
		e := setup(t, nh)
		a := e.instance(e.sealedStore(nil), "cache.retire", once)
		id := idem.Identity{Tenant: "t1", Principal: "alice"}
		req := a.request(id, "k-retire", e.fingerprint())
		first := a.run(req)
		if first.Kind != operation.Executed {
			t.Fatalf("first request: %+v", first)
		}
		a.wantReplay("replay read from the registry", a.run(req), first)
		a.wantReplay("replay from the cache", a.run(req), first)
		if a.hits() != 1 {
			t.Fatalf("cache hits %d after two replays, want 1 (the second)", a.hits())
		}
		rec, err := e.h.Store.Get(e.ctx, req.Scope)
		if err != nil {
			t.Fatal(err)
		}
		expires := rec.ExpiresAt
		// B prunes at the record's expiry by the database's clock; A's
		// clock is half a margin behind.
		e.setNow(expires)
		if got := e.pruneOnce(10); got.Retired != 1 {
			t.Fatalf("B's prune at expiry: %+v, want the record retired", got)
		}
		a.set(expires.Add(-cacheMargin / 2))
		res := a.run(req)
		if res.Kind != operation.Refused || res.Refusal.Code != idem.CodeKeyRetired || res.Refusal.OperationID != first.Record.OperationID {
			t.Fatalf("replay after B retired the record, A half a margin behind: %+v, want 409 KEY_RETIRED", res)
		}
		if a.hits() != 1 || a.calls.Load() != 1 {
			t.Fatalf("after retirement: %d hits, %d executions; want 1 and 1", a.hits(), a.calls.Load())
		}
	})
}

// testReplayCacheScopes: a cached answer goes only to its own scope and
// caller. Another principal, another tenant, another operation with the
// same key each run their own operation; a request that carries the
// cached scope but another caller's identity (what a keying bug would
// make) is never answered from the cache; a different fingerprint under
// the cached scope is 422 PAYLOAD_CONFLICT from the cache, as from the
// registry, without the operation ID.
// threat:replay-cache-cross-scope
func testReplayCacheScopes(t *testing.T, nh NewHarness) {
	bothStyles(t, func(t *testing.T, once bool) {
		e := setup(t, nh)
		a := e.instance(e.h.Store, "cache.scope", once)
		other := e.instance(e.h.Store, "cache.scope.other", once)
		alice := idem.Identity{Tenant: "t1", Principal: "alice"}
		fp := e.fingerprint()
		req := a.request(alice, "k-shared", fp)
		first := a.run(req)
		a.wantReplay("replay read from the registry", a.run(req), first)
		hits := a.hits()
		for _, id := range []idem.Identity{{Tenant: "t1", Principal: "bob"}, {Tenant: "t2", Principal: "alice"}} {
			res := a.run(a.request(id, "k-shared", fp))
			if res.Kind != operation.Executed || res.Record.OperationID == first.Record.OperationID {
				t.Fatalf("caller %+v with alice's key: %+v, want its own execution", id, res)
			}
		}
		if res := other.run(other.request(alice, "k-shared", fp)); res.Kind != operation.Executed {
			t.Fatalf("another operation with alice's key: %+v, want its own execution", res)
		}
		forged := req
		forged.Identity = idem.Identity{Tenant: "t1", Principal: "mallory"}
		a.run(forged)
		if a.hits() != hits {
			t.Fatalf("a request under alice's scope with mallory's identity was answered from the cache")
		}
		a.wantReplay("alice's replay from the cache", a.run(req), first)
		if a.hits() != hits+1 {
			t.Fatalf("alice's replay was not a cache hit")
		}
		conflict := req
		conflict.Fingerprint = e.fingerprint()
		res := a.run(conflict)
		if res.Kind != operation.Refused || res.Refusal.Code != idem.CodePayloadConflict || res.Refusal.OperationID != "" {
			t.Fatalf("a different payload with a cached key: %+v, want 422 PAYLOAD_CONFLICT without the operation ID", res)
		}
		if a.hits() != hits+2 {
			t.Fatalf("the conflict was not decided from the cache (hits %d, want %d)", a.hits(), hits+2)
		}
	})
}

// testReplayCacheKeyRing: a record sealed under key k1 is cached by an
// instance whose ring holds k1. The instance restarted with k1 retired
// from its ring — a new Store with the new ring, a new core — refuses the
// replay 503 RESPONSE_UNREADABLE, as the registry does: nothing an
// earlier core cached outlives its Store's key ring.
// threat:replay-cache-retired-key
func testReplayCacheKeyRing(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	old := e.instance(e.sealedStore(ring(t, "k1")), "cache.keys", false)
	id := idem.Identity{Tenant: "t1", Principal: "alice"}
	req := old.request(id, "k-sealed", e.fingerprint())
	first := old.run(req)
	old.wantReplay("replay read from the registry", old.run(req), first)
	old.wantReplay("replay from the cache", old.run(req), first)
	if old.hits() != 1 {
		t.Fatalf("hits %d, want 1", old.hits())
	}
	restarted := e.instance(e.sealedStore(ring(t, "k2")), "cache.keys", false)
	for i := range 2 {
		res := restarted.run(req)
		if res.Kind != operation.Refused || res.Refusal.Code != operation.CodeResponseUnreadable {
			t.Fatalf("replay %d after k1 left the ring: %+v, want 503 RESPONSE_UNREADABLE", i, res)
		}
	}
	if restarted.hits() != 0 || restarted.calls.Load() != 0 {
		t.Fatalf("the restarted instance: %d hits, %d executions; want none", restarted.hits(), restarted.calls.Load())
	}
}

// shadowDoor is a door in shadow that executes plainly every request
// enforce would answer from a record, and counts the verdicts.
type shadowDoor struct {
	operation.ExecuteFunc
	verdicts []string
}

func (d *shadowDoor) AnswerPlainly(context.Context) (bool, error) { return true, nil }
func (d *shadowDoor) CountVerdict(v string)                       { d.verdicts = append(d.verdicts, v) }

// testReplayCacheRules: a cached record goes through the rules the
// registry's record goes through. In shadow, a request enforce would
// answer from the cached record is executed plainly (Result Plain) with
// the verdict replay counted, as it is when the record is read from the
// registry; a core whose writer epoch the registry has fenced
// (Controller.BumpEpoch) still replays — reading is never fenced — from
// the cache as from the registry.
func testReplayCacheRules(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	a := e.instance(e.h.Store, "cache.rules", false)
	id := idem.Identity{Tenant: "t1", Principal: "alice"}
	req := a.request(id, "k-rules", e.fingerprint())
	first := a.run(req)
	a.wantReplay("replay read from the registry", a.run(req), first)
	hits := a.hits()
	d := &shadowDoor{ExecuteFunc: func(context.Context, registry.Tx, registry.Record) (operation.Answer, error) {
		t.Fatal("the shadow door's Execute ran")
		return operation.Answer{}, nil
	}}
	res := a.core.Run(e.ctx, req, d)
	if res.Kind != operation.Plain || len(d.verdicts) != 1 || d.verdicts[0] != registry.VerdictReplay || a.hits() != hits+1 {
		t.Fatalf("shadow over a cached record: %+v, verdicts %v, hits %d (was %d); want Plain, [replay], one hit", res, d.verdicts, a.hits(), hits)
	}
	e.bump()
	old := operation.NewCore(operation.Core{Store: e.h.Store, Config: a.core.Config, WriterEpoch: 0, ResolveWait: -1})
	if res := old.Run(e.ctx, req, operation.ExecuteFunc(func(context.Context, registry.Tx, registry.Record) (operation.Answer, error) {
		t.Fatal("a fenced writer executed")
		return operation.Answer{}, nil
	})); res.Kind != operation.Replayed {
		t.Fatalf("a fenced writer's replay read from the registry: %+v", res)
	}
	a.wantReplay("a fenced writer's replay from the cache", a.run(req), first)
	if a.hits() != hits+2 {
		t.Fatalf("hits %d, want %d", a.hits(), hits+2)
	}
}
