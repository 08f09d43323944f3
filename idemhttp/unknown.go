package idemhttp

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// UnknownScrapeLimit caps how many UNKNOWN operations one scrape reads;
// the count metric saturates there.
const UnknownScrapeLimit = 10000

var (
	unknownCountDesc = prometheus.NewDesc("idem_unknown_operations",
		"Operations whose outcome is UNKNOWN and awaits reconciliation (saturates at 10000).", nil, nil)
	unknownAgeDesc = prometheus.NewDesc("idem_unknown_oldest_age_seconds",
		"Age of the oldest UNKNOWN operation, 0 when there is none.", nil, nil)
	unknownByOpDesc = prometheus.NewDesc("idem_unknown_by_operation",
		"UNKNOWN operations by operation name (only names that have some; saturates with idem_unknown_operations).", []string{"operation"}, nil)
	unknownAgeByOpDesc = prometheus.NewDesc("idem_unknown_oldest_age_by_operation_seconds",
		"Age of the oldest UNKNOWN operation of each operation name that has some.", []string{"operation"}, nil)
)

// unknownCollector reads the registry's UNKNOWN operations at scrape time,
// so every instance reports the same shared figure.
type unknownCollector struct {
	store registry.Store
	now   func() time.Time
}

// NewUnknownCollector returns a collector of idem_unknown_operations and
// idem_unknown_oldest_age_seconds for store (O1), and of the same two by
// operation name (idem_unknown_by_operation{operation},
// idem_unknown_oldest_age_by_operation_seconds{operation}). Each scrape
// runs one query, bounded by two seconds; a failed query fails the
// scrape's totals instead of reporting zero.
func NewUnknownCollector(store registry.Store) prometheus.Collector {
	return &unknownCollector{store: store, now: time.Now}
}

func (c *unknownCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- unknownCountDesc
	ch <- unknownAgeDesc
	ch <- unknownByOpDesc
	ch <- unknownAgeByOpDesc
}

func (c *unknownCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	recs, err := c.store.ListOperations(ctx, registry.ListFilter{State: idem.StateUnknown, Limit: UnknownScrapeLimit})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(unknownCountDesc, err)
		ch <- prometheus.NewInvalidMetric(unknownAgeDesc, err)
		return
	}
	age := 0.0
	if len(recs) > 0 {
		age = max(0, c.now().Sub(recs[0].CreatedAt).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(unknownCountDesc, prometheus.GaugeValue, float64(len(recs)))
	ch <- prometheus.MustNewConstMetric(unknownAgeDesc, prometheus.GaugeValue, age)
	count, oldest := map[string]int{}, map[string]float64{}
	for _, r := range recs { // oldest first: the first of each name is its oldest
		if count[r.Operation] == 0 {
			oldest[r.Operation] = max(0, c.now().Sub(r.CreatedAt).Seconds())
		}
		count[r.Operation]++
	}
	for op, n := range count {
		ch <- prometheus.MustNewConstMetric(unknownByOpDesc, prometheus.GaugeValue, float64(n), op)
		ch <- prometheus.MustNewConstMetric(unknownAgeByOpDesc, prometheus.GaugeValue, oldest[op], op)
	}
}
