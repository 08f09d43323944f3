package outbox

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/registry"
)

// Metrics are a relay's Prometheus metrics. A nil *Metrics records
// nothing. Safe for concurrent use.
type Metrics struct {
	deliveredTotal prometheus.Counter
	failedTotal    prometheus.Counter
	deadTotal      prometheus.Counter
}

// StatsStore is the part of registry.Store the gauges read.
type StatsStore interface {
	OutboxStats(ctx context.Context) (registry.OutboxStats, error)
}

// NewMetrics creates the relay metrics and registers them with reg:
//
//	idem_outbox_delivered_total        messages delivered by this process's relays
//	idem_outbox_failed_attempts_total  failed delivery attempts recorded by them
//	idem_outbox_dead_lettered_total    messages they made dead letters
//	idem_outbox_lag_seconds            age of the oldest pending message, 0 when none
//	idem_outbox_pending                messages neither delivered nor dead
//	idem_outbox_dead_letters           dead letters awaiting an operator
//
// The counters are this process's; the three gauges are read from store
// at scrape time (one query, bounded by two seconds; a failed query fails
// the gauges instead of reporting zero), so every instance reports the
// same shared figures.
func NewMetrics(reg prometheus.Registerer, store StatsStore) *Metrics {
	m := &Metrics{
		deliveredTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_outbox_delivered_total",
			Help: "Outbox messages delivered by this process.",
		}),
		failedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_outbox_failed_attempts_total",
			Help: "Failed outbox delivery attempts recorded by this process (dead-lettering ones included).",
		}),
		deadTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_outbox_dead_lettered_total",
			Help: "Outbox messages this process made dead letters.",
		}),
	}
	reg.MustRegister(m.deliveredTotal, m.failedTotal, m.deadTotal, &statsCollector{store: store, now: time.Now})
	return m
}

func (m *Metrics) delivered(n int) {
	if m != nil {
		m.deliveredTotal.Add(float64(n))
	}
}

func (m *Metrics) failed(dead bool) {
	if m == nil {
		return
	}
	m.failedTotal.Inc()
	if dead {
		m.deadTotal.Inc()
	}
}

var (
	lagDesc = prometheus.NewDesc("idem_outbox_lag_seconds",
		"Age of the oldest outbox message neither delivered nor dead, 0 when there is none.", nil, nil)
	pendingDesc = prometheus.NewDesc("idem_outbox_pending",
		"Outbox messages neither delivered nor dead.", nil, nil)
	deadDesc = prometheus.NewDesc("idem_outbox_dead_letters",
		"Outbox messages given up on (dead letters), awaiting an operator.", nil, nil)
)

// statsCollector reads the outbox gauges at scrape time.
type statsCollector struct {
	store StatsStore
	now   func() time.Time
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- pendingDesc
	ch <- deadDesc
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.store.OutboxStats(ctx)
	if err != nil {
		for _, d := range []*prometheus.Desc{lagDesc, pendingDesc, deadDesc} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return
	}
	lag := 0.0
	if !st.OldestPending.IsZero() {
		lag = max(0, c.now().Sub(st.OldestPending).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, lag)
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(st.Dead))
}
