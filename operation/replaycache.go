package operation

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// ReplayCache configures a Core's in-process cache of settled records
// (Config.ReplayCache): a replay of an operation this Core has already
// replayed from the registry is then answered from memory, without a
// database round trip. The zero value is off: the cache trades one
// documented assumption — that this process's clock is no further behind
// the database's than Margin — for speed, and the registry alone needs
// no such assumption, so it is turned on deliberately (idem serve
// --replay-cache).
//
// What a cached answer promises (docs/contract.md §7 and §8, "Replays
// from memory"): it is the record the registry returned for the same
// scope — only SUCCEEDED, FAILED_FINAL and REJECTED records with their
// response, never a tombstone, a record in flight or UNKNOWN — its
// response checked against the digest taken when it was cached before
// every use, and it is decided exactly as the registry's record is
// (a different fingerprint is 422 PAYLOAD_CONFLICT). It is never served
// at or after the record's ExpiresAt minus Margin: Prune, on every
// driver and in every process sharing the registry, retires a settled
// record only once its ExpiresAt has come by the database's clock, and
// retirement is the only change the database accepts to a settled record
// besides a re-seal under another key (which changes no byte of the
// answer). An entry is keyed by the full scope hash, which binds tenant,
// principal, operation, API revision and key, and is served only to a
// request whose owner and tenant hash equal the record's.
type ReplayCache struct {
	// Entries bounds the number of records kept. 0 (the default) turns
	// the cache off; negative is invalid.
	Entries int
	// Bytes bounds the memory the entries hold, counted as their
	// response's body, media type, location and ETag plus
	// replayEntryOverhead bytes each. 0 means DefaultReplayCacheBytes;
	// negative is invalid. A record larger than the bound is not cached.
	Bytes int64
	// Margin is how long before a record's ExpiresAt the cache stops
	// serving it: the clock skew between this process and the database
	// it tolerates. 0 means DefaultReplayCacheMargin; negative means none
	// (only for a clock that is the database's, as in tests). It must be
	// shorter than the operation's Retention, else the cache would serve
	// nothing: Config.Validate refuses it.
	Margin time.Duration
	// Now is the clock the cache compares ExpiresAt with; nil means
	// time.Now. A test that injects "now" into its Store (the drivers'
	// Options.Now) passes the same clock here.
	Now func() time.Time
}

// Defaults of ReplayCache.
const (
	// DefaultReplayCacheBytes bounds a cache's memory when Bytes is 0:
	// 32 MiB.
	DefaultReplayCacheBytes = 32 << 20
	// DefaultReplayCacheMargin is the tolerated clock skew when Margin
	// is 0: one minute, far more than NTP-synchronised hosts drift, and
	// a minute of a retention that is at least a day long.
	DefaultReplayCacheMargin = time.Minute
	// replayEntryOverhead is what an entry costs besides its response's
	// strings and body: the record, the list element, the map slot.
	replayEntryOverhead = 512
)

// On reports whether the cache is on (Entries > 0).
func (c ReplayCache) On() bool { return c.Entries > 0 }

func (c ReplayCache) bytes() int64 {
	if c.Bytes == 0 {
		return DefaultReplayCacheBytes
	}
	return c.Bytes
}

func (c ReplayCache) margin() time.Duration {
	return orDefault(c.Margin, DefaultReplayCacheMargin)
}

// ReplayCacheObserver is an Observer that counts the requests answered
// from the replay cache: ReplayCacheHit is called once for each (a
// replay, or a conflict decided on a cached record). Safe for concurrent
// use, as every Observer method.
type ReplayCacheObserver interface {
	ReplayCacheHit(operation string)
}

// ReplayCacheStats counts what a Core's replay cache did.
type ReplayCacheStats struct {
	// Hits counts requests answered from the cache (replays and
	// conflicts); Misses those that read the registry.
	Hits, Misses int64
	// Entries and Bytes are what it holds now.
	Entries int
	Bytes   int64
}

// replayCache is the cache itself: a map by scope and a list in
// least-recently-used order, under one mutex. Safe for concurrent use. A
// nil *replayCache is off: get misses, put keeps nothing.
type replayCache struct {
	conf   ReplayCache
	limit  int64
	margin time.Duration

	mu      sync.Mutex
	entries map[idem.ScopeHash]*list.Element
	order   list.List // of *replayEntry, most recently used first
	size    int64

	hits, misses atomic.Int64
}

type replayEntry struct {
	rec    registry.Record
	digest [32]byte
	size   int64
	// until is rec.ExpiresAt minus the margin: served only before it.
	until time.Time
}

// newReplayCache returns the cache conf describes, or nil when it is off.
func newReplayCache(conf ReplayCache) *replayCache {
	if !conf.On() {
		return nil
	}
	return &replayCache{
		conf:    conf,
		limit:   conf.bytes(),
		margin:  conf.margin(),
		entries: make(map[idem.ScopeHash]*list.Element),
	}
}

func (rc *replayCache) now() time.Time {
	if rc.conf.Now != nil {
		return rc.conf.Now()
	}
	return time.Now()
}

// cacheable reports whether rec may be cached for claim: settled with its
// response, not retired, with an expiry, and the claim's own.
func cacheable(rec registry.Record, cl registry.Claim) bool {
	return rec.State.Terminal() && rec.Response != nil &&
		!rec.Retired() && !rec.ExpiresAt.IsZero() && rec.Scope == cl.Scope && owns(rec, cl)
}

// owns reports whether rec was made under cl's operation, owner and
// tenant: the scope binds them already; this is checked again on every
// hit so that no bug in keying can hand one caller's answer to another.
func owns(rec registry.Record, cl registry.Claim) bool {
	return rec.Operation == cl.Operation && rec.Owner == cl.Owner && rec.TenantHash == registry.TenantHash(cl.Tenant)
}

// get returns the record cached for cl's scope while it may still be
// served: before its expiry minus the margin, its response matching the
// digest taken when it was cached, and cl's own. An entry past its time
// or failing its digest is dropped. ok false: read the registry.
func (rc *replayCache) get(cl registry.Claim) (rec registry.Record, ok bool) {
	if rc == nil {
		return registry.Record{}, false
	}
	now := rc.now()
	rc.mu.Lock()
	el, found := rc.entries[cl.Scope]
	var e *replayEntry
	if found {
		e = el.Value.(*replayEntry)
		if !now.Before(e.until) {
			rc.remove(el)
			found = false
		} else {
			rc.order.MoveToFront(el)
		}
	}
	rc.mu.Unlock()
	if found && e.rec.Response.Digest() != e.digest {
		rc.drop(cl.Scope, e) // changed in memory: never served
		found = false
	}
	if !found || !owns(e.rec, cl) {
		rc.misses.Add(1)
		return registry.Record{}, false
	}
	rc.hits.Add(1)
	return e.rec, true
}

// put caches rec, a record the registry returned for cl's scope and the
// run decided to replay, when it is cacheable and not already within its
// margin of expiry. The response is copied, and its digest taken now:
// the drivers verified it against the stored digest before returning it.
func (rc *replayCache) put(rec registry.Record, cl registry.Claim) {
	if rc == nil || !cacheable(rec, cl) {
		return
	}
	until := rec.ExpiresAt.Add(-rc.margin)
	if !rc.now().Before(until) {
		return
	}
	resp := *rec.Response
	resp.Body = append([]byte(nil), resp.Body...)
	rec.Response = &resp
	e := &replayEntry{
		rec:    rec,
		digest: resp.Digest(),
		size:   int64(len(resp.Body)+len(resp.MediaType)+len(resp.Location)+len(resp.ETag)+len(rec.OperationID)) + replayEntryOverhead,
		until:  until,
	}
	if e.size > rc.limit {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if el, ok := rc.entries[rec.Scope]; ok {
		rc.remove(el)
	}
	rc.entries[rec.Scope] = rc.order.PushFront(e)
	rc.size += e.size
	for len(rc.entries) > rc.conf.Entries || rc.size > rc.limit {
		rc.remove(rc.order.Back())
	}
}

// drop removes e if it is still the entry of scope.
func (rc *replayCache) drop(scope idem.ScopeHash, e *replayEntry) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if el, ok := rc.entries[scope]; ok && el.Value.(*replayEntry) == e {
		rc.remove(el)
	}
}

// remove takes el out; rc.mu is held.
func (rc *replayCache) remove(el *list.Element) {
	e := rc.order.Remove(el).(*replayEntry)
	delete(rc.entries, e.rec.Scope)
	rc.size -= e.size
}

// flush empties the cache.
func (rc *replayCache) flush() {
	if rc == nil {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	clear(rc.entries)
	rc.order.Init()
	rc.size = 0
}

func (rc *replayCache) stats() ReplayCacheStats {
	if rc == nil {
		return ReplayCacheStats{}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return ReplayCacheStats{Hits: rc.hits.Load(), Misses: rc.misses.Load(), Entries: len(rc.entries), Bytes: rc.size}
}

// ReplayCacheStats returns what the Core's replay cache did and holds;
// zero when it is off.
func (c *Core) ReplayCacheStats() ReplayCacheStats { return c.cache.stats() }

// FlushReplayCache empties the Core's replay cache: every later replay
// reads the registry until it is cached again. The cache belongs to its
// Core and its Store, whose key ring never changes while it runs (a key
// ring is loaded when the Store is built; retiring a key is a restart
// with a new ring, which starts with an empty cache); a program that
// changes what its Store may serve by other means calls this.
func (c *Core) FlushReplayCache() { c.cache.flush() }
