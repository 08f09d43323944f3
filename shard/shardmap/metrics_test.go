package shardmap_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/shard/shardmap"
)

// TestDrainingCollector: idem_tenants_draining counts the draining entries of
// both directories (in memory, and the PostgreSQL table) and
// idem_tenant_draining_oldest_seconds is the age of the oldest one's last
// change (what IdemTenantDrainingTooLong fires on); undrained, both are 0;
// a directory that cannot be read fails both metrics instead of
// reporting no drain.
// threat:alert-blind-spot
func TestDrainingCollector(t *testing.T) {
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
	if _, err := pgdir.InitDefault(ctx, "a", "test"); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]shardmap.Directory{"static": static, "postgres": pgdir} {
		t.Run(name, func(t *testing.T) {
			var now time.Time
			reg := prometheus.NewRegistry()
			reg.MustRegister(shardmap.NewCollectorAt(dir, func() time.Time { return now }))
			want := func(n, age float64) {
				t.Helper()
				fams, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]float64{}
				for _, f := range fams {
					got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
				}
				if len(got) != 2 || got["idem_tenants_draining"] != n || got["idem_tenant_draining_oldest_seconds"] != age {
					t.Errorf("gauges %v; want %v draining, oldest %v s", got, n, age)
				}
			}
			want(0, 0)
			first, err := dir.Set(ctx, shardmap.Entry{Tenant: "t1", Shard: "a", Draining: true}, 0, "mover")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t2", Shard: "b"}, 0, "ann"); err != nil {
				t.Fatal(err)
			}
			second, err := dir.Set(ctx, shardmap.Entry{Tenant: "t3", Shard: "b", Draining: true}, 0, "mover")
			if err != nil {
				t.Fatal(err)
			}
			oldest := first.UpdatedAt
			if second.UpdatedAt.Before(oldest) {
				oldest = second.UpdatedAt
			}
			now = oldest.Add(90 * time.Minute)
			want(2, 90*60)
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t1", Shard: "a"}, first.Version, "mover"); err != nil {
				t.Fatal(err)
			}
			if _, err := dir.Set(ctx, shardmap.Entry{Tenant: "t3", Shard: "b"}, second.Version, "mover"); err != nil {
				t.Fatal(err)
			}
			want(0, 0)
		})
	}
	pg.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(shardmap.NewCollector(pgdir))
	if _, err := reg.Gather(); err == nil {
		t.Error("a directory that cannot be read must fail the gauges, not report no drain")
	}
}
