package shardmap_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/shard/shardmap"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// shardNames are the shards of the tests' directories.
var shardNames = []string{"a", "b", "c"}

// TestDirectorySet: both directories (in memory, and the PostgreSQL
// table) change an entry only by a compare-and-set on its version — a
// change based on an old version is ErrStale — and refuse unknown shard
// names and entries they cannot hold; a tenant without an entry, or with
// bytes no table holds, goes to the default at version 0.
// threat:shard-map-lost-update
func TestDirectorySet(t *testing.T) {
	ctx := context.Background()
	static, err := shardmap.NewStaticDirectory("a", nil, shardNames)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := idempg.Open(ctx, pgtest.DSN(t), idempg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	pgdir := pg.ShardDirectory(shardNames)
	if _, err := pgdir.Lookup(ctx, "t1"); !errors.Is(err, shardmap.ErrNoDefault) {
		t.Errorf("lookup before a default: %v, want ErrNoDefault", err)
	}
	if def, err := pgdir.InitDefault(ctx, "a", "test"); err != nil || def != "a" {
		t.Fatalf("InitDefault: %q, %v", def, err)
	}
	if def, err := pgdir.InitDefault(ctx, "b", "test"); err != nil || def != "a" {
		t.Errorf("second InitDefault: %q, %v; want the default in place, a", def, err)
	}
	for name, dir := range map[string]shardmap.Directory{"static": static, "postgres": pgdir} {
		t.Run(name, func(t *testing.T) {
			for _, tenant := range []string{"t1", "bad\x00", "\xff"} {
				if e, err := dir.Lookup(ctx, tenant); err != nil || e.Shard != "a" || e.Version != 0 {
					t.Errorf("lookup %q without an entry: %+v, %v; want the default a at version 0", tenant, e, err)
				}
			}
			e, err := dir.Set(ctx, shardmap.Entry{Tenant: "t1", Shard: "b"}, 0, "ann")
			if err != nil || e.Version != 1 || e.UpdatedBy != "ann" {
				t.Fatalf("first set: %+v, %v", e, err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t1", Shard: "c"}, 0, "bob"); !errors.Is(err, shardmap.ErrStale) {
				t.Errorf("second set from version 0: %v, want ErrStale", err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t1", Shard: "c", Draining: true}, 1, "bob"); err != nil {
				t.Errorf("set from version 1: %v", err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t1", Shard: "a"}, 1, "cid"); !errors.Is(err, shardmap.ErrStale) {
				t.Errorf("set from version 1 again: %v, want ErrStale", err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t9", Shard: "b"}, 3, "cid"); !errors.Is(err, shardmap.ErrStale) {
				t.Errorf("set of a tenant without an entry from version 3: %v, want ErrStale", err)
			}
			if e, err := dir.Lookup(ctx, "t1"); err != nil || e.Shard != "c" || !e.Draining || e.Version != 2 {
				t.Errorf("lookup: %+v, %v; want shard c, draining, version 2", e, err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t2", Shard: "z"}, 0, "ann"); !errors.Is(err, shardmap.ErrUnknownShard) {
				t.Errorf("unknown shard: %v, want ErrUnknownShard", err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t\x00", Shard: "b"}, 0, "ann"); !errors.Is(err, shardmap.ErrInvalidEntry) {
				t.Errorf("tenant with NUL: %v, want ErrInvalidEntry", err)
			}
			if list, err := dir.List(ctx); err != nil || len(list) != 1 || list[0].Tenant != "t1" {
				t.Errorf("list: %+v, %v", list, err)
			}
		})
	}
}

// TestParseMap: a shard map is read strictly — a member given twice, an
// unknown member, an absent default or a shard the service does not
// have is refused — and a valid one routes as it says.
func TestParseMap(t *testing.T) {
	for _, bad := range []string{
		`{"default":"a","tenants":{"t1":"b","t1":"c"}}`,
		`{"default":"a","default":"b"}`,
		`{"default":"a","tenant":{"t1":"b"}}`,
		`{"tenants":{"t1":"b"}}`,
		`{"default":"z"}`,
		`{"default":"a","tenants":{"t1":"z"}}`,
		`{"default":"a","tenants":{"t1":""}}`,
		`{"default":"a"} x`,
	} {
		if _, err := shardmap.ParseMap([]byte(bad), shardNames); err == nil {
			t.Errorf("ParseMap(%s) accepted it", bad)
		}
	}
	d, err := shardmap.ParseMap([]byte(`{"default":"a","tenants":{"t1":"b"}}`), shardNames)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]string{"t1": "b", "t2": "a"} {
		if e, err := d.Lookup(context.Background(), tenant); err != nil || e.Shard != want {
			t.Errorf("lookup %s: %+v, %v; want %s", tenant, e, err, want)
		}
	}
}
