package shardmap

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NewCollectorAt is NewCollector with the clock now, for tests.
func NewCollectorAt(dir Directory, now func() time.Time) prometheus.Collector {
	return &collector{dir: dir, now: now}
}
