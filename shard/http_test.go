package shard_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard"
	"github.com/idemkit/idem/shard/shardmap"
)

// TestRoutesTenantToItsShard: a request of a tenant is executed on the
// tenant's shard — its record and its business row are there and on no
// other shard — its retry replays there, its monitor link answers
// through the same routing, and a tenant without an entry goes to the
// default shard. threat:shard-misroute
func TestRoutesTenantToItsShard(t *testing.T) {
	eachDriver(t, func(t *testing.T, stores map[string]registry.Store) {
		dir, err := shardmap.NewStaticDirectory("a", map[string]string{"t1": "b", "t2": "c"}, shardNames)
		if err != nil {
			t.Fatal(err)
		}
		url := server(t, &shard.Router{Shards: stores, Directory: dir})
		for tenant, want := range map[string]string{"t1": "b", "t2": "c", "t3": "a", "": "a"} {
			key := idem.NewKey()
			first := do(t, http.MethodPost, url+"/v1/notes", tenant, key)
			if first.status != http.StatusCreated || first.shard != want {
				t.Fatalf("tenant %q: %+v, want 201 from shard %s", tenant, first, want)
			}
			again := do(t, http.MethodPost, url+"/v1/notes", tenant, key)
			if again.status != http.StatusCreated || !again.replayed || again.op != first.op {
				t.Errorf("tenant %q: retry %+v, want the replay of %+v", tenant, again, first)
			}
			if st := do(t, http.MethodGet, url+"/v1/operations/"+first.op, tenant, ""); st.status != http.StatusOK {
				t.Errorf("tenant %q: monitor %d, want 200", tenant, st.status)
			}
			for name, st := range stores {
				n := notes(t, st, tenant)
				_, gerr := st.GetByID(context.Background(), first.op)
				if name == want && (n != 1 || gerr != nil) {
					t.Errorf("tenant %q: shard %s holds %d notes, record: %v; want 1 and the record", tenant, name, n, gerr)
				}
				if name != want && (n != 0 || !errors.Is(gerr, registry.ErrNotFound)) {
					t.Errorf("tenant %q: shard %s holds %d notes, record: %v; want none", tenant, name, n, gerr)
				}
			}
		}
		if got := do(t, http.MethodPost, url+"/v1/notes", "-", idem.NewKey()); got.status != http.StatusUnauthorized || got.code != string(idem.CodeUnauthenticated) {
			t.Errorf("no identity: %+v, want 401 UNAUTHENTICATED", got)
		}
	})
}

// TestDrainingTenant: while a tenant's entry is draining its new keys
// are refused 503 DRAINING and nothing is executed, its finished
// operations still replay, and other tenants are served; once undrained
// it is served again. threat:shard-move-double-execution
func TestDrainingTenant(t *testing.T) {
	eachDriver(t, func(t *testing.T, stores map[string]registry.Store) {
		ctx := context.Background()
		dir, err := shardmap.NewStaticDirectory("a", map[string]string{"t1": "b"}, shardNames)
		if err != nil {
			t.Fatal(err)
		}
		url := server(t, &shard.Router{Shards: stores, Directory: dir, Refresh: time.Nanosecond})
		done := idem.NewKey()
		if got := do(t, http.MethodPost, url+"/v1/notes", "t1", done); got.status != http.StatusCreated {
			t.Fatalf("before the drain: %+v", got)
		}
		e, _ := dir.Lookup(ctx, "t1")
		e.Draining = true
		if e, err = dir.Set(ctx, e, e.Version, "test"); err != nil {
			t.Fatal(err)
		}
		if got := do(t, http.MethodPost, url+"/v1/notes", "t1", idem.NewKey()); got.status != http.StatusServiceUnavailable || got.code != string(idem.CodeDraining) {
			t.Errorf("new key while draining: %+v, want 503 DRAINING", got)
		}
		if got := do(t, http.MethodPost, url+"/v1/notes", "t1", done); got.status != http.StatusCreated || !got.replayed {
			t.Errorf("replay while draining: %+v, want 201 replayed", got)
		}
		if got := do(t, http.MethodPost, url+"/v1/notes", "t2", idem.NewKey()); got.status != http.StatusCreated {
			t.Errorf("another tenant while t1 drains: %+v, want 201", got)
		}
		if n := notes(t, stores["b"], "t1"); n != 1 {
			t.Errorf("t1 has %d notes on its shard, want 1 (nothing executed while draining)", n)
		}
		e.Draining = false
		if _, err := dir.Set(ctx, e, e.Version, "test"); err != nil {
			t.Fatal(err)
		}
		if got := do(t, http.MethodPost, url+"/v1/notes", "t1", idem.NewKey()); got.status != http.StatusCreated {
			t.Errorf("after the drain: %+v, want 201", got)
		}
	})
}

// TestRouterFailsClosed: once the directory stops answering, a Router
// routes by its cached entry only until that is MaxAge old; then it
// refuses (ErrRouteUnavailable, 503 STORE_UNAVAILABLE at the door)
// rather than route by a map that may have changed. threat:shard-map-stale
func TestRouterFailsClosed(t *testing.T) {
	ctx := context.Background()
	stores := openShards(t, "sqlite")
	dirStore, err := idempg.Open(ctx, pgtest.DSN(t), idempg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := dirStore.ShardDirectory(shardNames)
	if _, err := dir.InitDefault(ctx, "a", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t1", Shard: "b"}, 0, "test"); err != nil {
		t.Fatal(err)
	}
	router := &shard.Router{Shards: stores, Directory: dir, Refresh: time.Millisecond, MaxAge: 3 * time.Second}
	url := server(t, router)
	if got := do(t, http.MethodPost, url+"/v1/notes", "t1", idem.NewKey()); got.status != http.StatusCreated || got.shard != "b" {
		t.Fatalf("directory up: %+v", got)
	}
	// MaxAge (3 s) is far above the time from the POST's route to here,
	// even on a loaded machine: the cached entry must still serve.
	dirStore.Close() // the directory's database is gone
	if r, err := router.Route(ctx, "t1"); err != nil || r.Name != "b" {
		t.Errorf("within MaxAge: %+v, %v; want the cached shard b", r, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := router.Route(ctx, "t1")
		if errors.Is(err, shard.ErrRouteUnavailable) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router still routes 30s after the directory went away: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the cache to age
	}
	if got := do(t, http.MethodPost, url+"/v1/notes", "t1", idem.NewKey()); got.status != http.StatusServiceUnavailable || got.code != string(idem.CodeStoreUnavailable) {
		t.Errorf("directory gone past MaxAge: %+v, want 503 STORE_UNAVAILABLE", got)
	}
}
