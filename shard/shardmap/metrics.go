package shardmap

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	tenantsDrainingDesc = prometheus.NewDesc("idem_tenants_draining",
		"Tenants whose directory entry is draining (a tenant move in progress, or left half-way): their new operations are refused 503 DRAINING.", nil, nil)
	tenantDrainingOldestDesc = prometheus.NewDesc("idem_tenant_draining_oldest_seconds",
		"Seconds since the oldest draining tenant's directory entry last changed; 0 when no tenant is draining.", nil, nil)
)

// collector reads the directory's draining entries at scrape time.
type collector struct {
	dir Directory
	now func() time.Time
}

// NewCollector returns a collector of the tenants dir has draining:
//
//	idem_tenants_draining                 entries with Draining set
//	idem_tenant_draining_oldest_seconds   seconds since the oldest of them last changed (its UpdatedAt); 0 when none
//
// A tenant move drains its tenant, copies it, switches the map and
// undrains (docs/shards-move.md), so a drain that lasts is a move left
// half-way. Each scrape runs one List, bounded by two seconds — its cost
// grows with the directory's explicit entries (tenants on the default
// have none); a failed List fails both metrics instead of reporting zero.
// Safe for concurrent use.
func NewCollector(dir Directory) prometheus.Collector {
	return &collector{dir: dir, now: time.Now}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantsDrainingDesc
	ch <- tenantDrainingOldestDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	entries, err := c.dir.List(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(tenantsDrainingDesc, err)
		ch <- prometheus.NewInvalidMetric(tenantDrainingOldestDesc, err)
		return
	}
	var n int
	var oldest time.Time
	for _, e := range entries {
		if e.Draining {
			n++
			if oldest.IsZero() || e.UpdatedAt.Before(oldest) {
				oldest = e.UpdatedAt
			}
		}
	}
	age := 0.0
	if n > 0 {
		age = max(0, c.now().Sub(oldest).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(tenantsDrainingDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(tenantDrainingOldestDesc, prometheus.GaugeValue, age)
}
