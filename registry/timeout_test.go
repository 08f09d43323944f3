package registry_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func claimFor(key string) registry.Claim {
	id := idem.Identity{Tenant: "t", Principal: "p"}
	k, _ := idem.ParseKey([]string{key}, idem.KeyPolicy{})
	return registry.Claim{
		Scope:     idem.ScopeOf(id, "op", "v1", k),
		Operation: "op",
		Owner:     registry.OwnerOf(id),
		Lease:     time.Minute,
		Retention: time.Hour,
	}
}

// TestStoreTimeout: with the database's write lock (SQLite) or its only
// pooled connection (PostgreSQL, pool_max_conns=1) held elsewhere, a
// bounded call fails within about the bound with an error wrapping
// registry.ErrUnavailable, and succeeds once the holder lets go (with a
// generous bound: how fast a free database answers is not what is
// checked, and a loaded machine can take longer than the bound). On
// SQLite the calls are Reserve, ExecuteOnce and MarkEnforced (a
// request's first acceptance under enforce); on PostgreSQL Complete: Reserve has its own connections (the
// acceptance lane), so it answers even while the main pool is held.
func TestStoreTimeout(t *testing.T) {
	const bound = 300 * time.Millisecond
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "t.db")
		ctx := context.Background()
		store, err := idemstore.Open(ctx, "sqlite:"+path, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		holder, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		conn, err := holder.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ok := func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
			return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte("ok")}}, nil
		}
		for name, call := range map[string]func(registry.Store) error{
			"Reserve": func(s registry.Store) error {
				_, _, err := s.Reserve(context.Background(), claimFor("k-1"))
				return err
			},
			"ExecuteOnce": func(s registry.Store) error {
				_, err := s.ExecuteOnce(context.Background(), claimFor("k-2"), ok)
				return err
			},
			"MarkEnforced": func(s registry.Store) error {
				_, err := s.MarkEnforced(context.Background(), "op")
				return err
			},
		} {
			t.Log(name)
			if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				t.Fatal(err)
			}
			checkBounded(t, store, bound, call, func() {
				if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		store, err := idemstore.Open(ctx, pgtest.DSN(t)+"&pool_max_conns=1", idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		held := make(chan struct{})
		release := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- store.InTx(ctx, func(context.Context, registry.Tx) error {
				close(held)
				<-release
				return nil
			})
		}()
		<-held
		rec, created, err := registry.WithTimeout(store, freeBound).Reserve(context.Background(), claimFor("k-1"))
		if err != nil || !created {
			close(release)
			<-done
			t.Fatalf("Reserve through the acceptance lane with the main pool held: created %v, %v", created, err)
		}
		complete := func(s registry.Store) error {
			_, err := s.Complete(context.Background(), rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
				return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte("ok")}}, nil
			})
			return err
		}
		letGo := func() {
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			select {
			case <-release:
			default:
				letGo() // a failed check must not leave Close waiting for the held connection
			}
		}()
		checkBounded(t, store, bound, complete, letGo)
	})
}

// freeBound bounds the calls of TestStoreTimeout that must succeed.
const freeBound = time.Minute

// checkBounded calls call through store bounded by bound while the
// database is held, expecting it to fail within about the bound; then
// letGo lets the database go and call must succeed (within freeBound).
func checkBounded(t *testing.T, store registry.Store, bound time.Duration, call func(registry.Store) error, letGo func()) {
	t.Helper()
	start := time.Now()
	err := call(registry.WithTimeout(store, bound))
	took := time.Since(start)
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("call with the database held: %v; want registry.ErrUnavailable", err)
	}
	if took > bound+2*time.Second {
		t.Errorf("call with the database held failed after %v; want about %v", took, bound)
	}
	letGo()
	if err := call(registry.WithTimeout(store, freeBound)); err != nil {
		t.Fatalf("call after the holder let go: %v", err)
	}
	t.Logf("bounded call failed after %v (bound %v)", took.Round(time.Millisecond), bound)
}

// watchingStore is a Store (only embedded: its other methods are never
// called) that is also a registry.Watcher and records the ctx of Watch.
type watchingStore struct {
	registry.Store
	deadline bool // whether Watch's ctx had a deadline
	ch       chan struct{}
}

func (w *watchingStore) Watch(ctx context.Context, _ idem.ScopeHash) (<-chan struct{}, func()) {
	_, w.deadline = ctx.Deadline()
	return w.ch, func() {}
}

// TestWithTimeoutWatcher: the bounded Store is a Watcher exactly when the
// wrapped one is, and bounds Watch's setup.
func TestWithTimeoutWatcher(t *testing.T) {
	inner := &watchingStore{ch: make(chan struct{})}
	w, ok := registry.WithTimeout(inner, time.Minute).(registry.Watcher)
	if !ok {
		t.Fatal("WithTimeout hid the inner Store's Watcher")
	}
	if ch, _ := w.Watch(context.Background(), idem.ScopeHash{}); ch != inner.ch || !inner.deadline {
		t.Errorf("Watch passed through: same channel %v, bounded %v", ch == inner.ch, inner.deadline)
	}
	type plain struct{ registry.Store }
	if _, ok := registry.WithTimeout(plain{}, time.Minute).(registry.Watcher); ok {
		t.Error("WithTimeout of a Store without Watch is a Watcher")
	}
}
