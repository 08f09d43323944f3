package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard/shardmap"
)

// Defaults of a Router's cache.
const (
	// DefaultRefresh is how long a Router uses a directory answer before
	// it reads the entry again, when Router.Refresh is 0.
	DefaultRefresh = time.Second
	// DefaultMaxAge is the oldest answer a Router uses while the
	// directory fails to answer, when Router.MaxAge is 0.
	DefaultMaxAge = 10 * time.Second
	// DefaultCacheSize is how many tenants' answers a Router keeps when
	// Router.CacheSize is 0.
	DefaultCacheSize = 100_000
)

// ErrRouteUnavailable: the Router could not find the tenant's shard — the
// directory failed to answer and the cached answer, if any, is older than
// MaxAge, or the directory names a shard the Router does not have. It
// wraps the cause. The request fails closed: 503 STORE_UNAVAILABLE.
var ErrRouteUnavailable = errors.New("shard: the tenant's shard is unknown")

// Router finds the shard of a tenant. Set the fields before the first
// Route and do not change them; the unexported state's zero value is
// ready. Safe for concurrent use.
type Router struct {
	// Shards are the shards by name, each the registry beside its
	// business tables. Required.
	Shards map[string]registry.Store
	// Directory maps tenants to shard names. Required.
	Directory shardmap.Directory
	// Refresh is how long an answer of the directory is used before it is
	// read again (lazily, by the request that finds it old); 0 or less
	// means DefaultRefresh. A change of the directory (a drain, a switch)
	// reaches every Router within about this long.
	Refresh time.Duration
	// MaxAge bounds how old an answer may be and still be used while the
	// directory fails to answer; past it Route fails (fail closed). 0 or
	// less means DefaultMaxAge; it is never below Refresh.
	MaxAge time.Duration
	// CacheSize bounds the tenants cached; 0 or less means
	// DefaultCacheSize. When full, the cache is emptied.
	CacheSize int

	mu    sync.Mutex
	cache map[string]cached
}

// cached is a directory answer and when it was read.
type cached struct {
	e  shardmap.Entry
	at time.Time
}

// Route is where a request goes.
type Route struct {
	// Name is the shard's name, Store its registry.
	Name  string
	Store registry.Store
	// Entry is the directory's answer it was found with.
	Entry shardmap.Entry
}

// Route returns the tenant's shard. It reads the tenant's entry when the
// cached answer is older than Refresh; if that read fails it uses the
// cached answer until it is older than MaxAge, then fails with
// ErrRouteUnavailable. ctx governs the directory read.
func (r *Router) Route(ctx context.Context, tenant string) (Route, error) {
	e, err := r.entry(ctx, tenant)
	if err != nil {
		return Route{}, err
	}
	st, ok := r.Shards[e.Shard]
	if !ok {
		return Route{}, fmt.Errorf("%w: the directory sends tenant to shard %q, which this service does not have", ErrRouteUnavailable, e.Shard)
	}
	return Route{Name: e.Shard, Store: st, Entry: e}, nil
}

// entry returns the tenant's cached or freshly read entry.
func (r *Router) entry(ctx context.Context, tenant string) (shardmap.Entry, error) {
	refresh := cmp.Or(max(r.Refresh, 0), DefaultRefresh)
	maxAge := max(cmp.Or(max(r.MaxAge, 0), DefaultMaxAge), refresh)
	r.mu.Lock()
	c, ok := r.cache[tenant]
	r.mu.Unlock()
	if ok && time.Since(c.at) < refresh {
		return c.e, nil
	}
	e, err := r.Directory.Lookup(ctx, tenant)
	if err != nil {
		if ok && time.Since(c.at) < maxAge {
			return c.e, nil
		}
		return shardmap.Entry{}, fmt.Errorf("%w: %w", ErrRouteUnavailable, err)
	}
	r.mu.Lock()
	if r.cache == nil || len(r.cache) >= cmp.Or(max(r.CacheSize, 0), DefaultCacheSize) {
		r.cache = make(map[string]cached)
	}
	r.cache[tenant] = cached{e: e, at: time.Now()}
	r.mu.Unlock()
	return e, nil
}
