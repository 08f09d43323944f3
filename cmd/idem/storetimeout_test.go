package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/drivers"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

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
// bounded Reserve fails within about the bound with an error wrapping
// registry.ErrUnavailable, and succeeds once the holder lets go.
func TestStoreTimeout(t *testing.T) {
	const bound = 300 * time.Millisecond
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "t.db")
		ctx := context.Background()
		store, err := drivers.Open(ctx, "sqlite:"+path, drivers.Options{})
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
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		checkBounded(t, withStoreTimeout(store, bound), bound, func() {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		store, err := drivers.Open(ctx, pgtest.DSN(t)+"&pool_max_conns=1", drivers.Options{})
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
		checkBounded(t, withStoreTimeout(store, bound), bound, func() {
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	})
}

func checkBounded(t *testing.T, s registry.Store, bound time.Duration, letGo func()) {
	t.Helper()
	start := time.Now()
	_, _, err := s.Reserve(context.Background(), claimFor("k-1"))
	took := time.Since(start)
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Reserve with the database held: %v; want registry.ErrUnavailable", err)
	}
	if took > bound+2*time.Second {
		t.Errorf("Reserve with the database held failed after %v; want about %v", took, bound)
	}
	letGo()
	if _, created, err := s.Reserve(context.Background(), claimFor("k-1")); err != nil || !created {
		t.Fatalf("Reserve after the holder let go: created %v, %v", created, err)
	}
	t.Logf("bounded Reserve failed after %v (bound %v)", took.Round(time.Millisecond), bound)
}
