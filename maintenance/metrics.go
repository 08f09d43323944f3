package maintenance

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/registry"
)

var (
	pruneSuccessDesc = prometheus.NewDesc("idem_prune_last_success_timestamp_seconds",
		"When the newest pruning pass that finished without error ended (Unix seconds), by any runner or idem prune; 0 when none of the recorded passes did.", nil, nil)
	pruneLastDesc = prometheus.NewDesc("idem_prune_last_run_timestamp_seconds",
		"When the newest recorded pruning pass ended (Unix seconds); 0 when none is recorded.", nil, nil)
	pruneFailedDesc = prometheus.NewDesc("idem_prune_last_run_failed",
		"1 when the newest recorded pruning pass stopped on an error, else 0.", nil, nil)
)

// pruneCollector reads the registry's recorded pruning passes at scrape
// time.
type pruneCollector struct{ store registry.PruneLog }

// NewPruneCollector returns a collector of the pruning passes recorded in
// the registry (registry.PruneLog: every Runner's and every "idem prune"'s,
// so every instance reports the same figures):
//
//	idem_prune_last_success_timestamp_seconds  end of the newest pass without error; 0 when none of the kept ones
//	idem_prune_last_run_timestamp_seconds      end of the newest pass; 0 when none is recorded
//	idem_prune_last_run_failed                 1 when the newest pass stopped on an error
//
// Each scrape runs one query (the newest registry.MaxPruneRuns passes),
// bounded by two seconds; a failed query fails the three metrics instead
// of reporting zero. Safe for concurrent use.
func NewPruneCollector(store registry.PruneLog) prometheus.Collector {
	return pruneCollector{store: store}
}

func (c pruneCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pruneSuccessDesc
	ch <- pruneLastDesc
	ch <- pruneFailedDesc
}

func (c pruneCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	runs, err := c.store.PruneRuns(ctx, registry.MaxPruneRuns)
	if err != nil {
		for _, d := range []*prometheus.Desc{pruneSuccessDesc, pruneLastDesc, pruneFailedDesc} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return
	}
	var success, last, failed float64
	if len(runs) > 0 { // newest first
		last = unix(runs[0].FinishedAt)
		if runs[0].Error != "" {
			failed = 1
		}
	}
	for _, r := range runs {
		if r.Error == "" {
			success = unix(r.FinishedAt)
			break
		}
	}
	ch <- prometheus.MustNewConstMetric(pruneSuccessDesc, prometheus.GaugeValue, success)
	ch <- prometheus.MustNewConstMetric(pruneLastDesc, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(pruneFailedDesc, prometheus.GaugeValue, failed)
}

// unix is t in Unix seconds, 0 for the zero time.
func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
