package recovery

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// Metrics are the recovery worker's Prometheus metrics. A nil *Metrics
// records nothing.
type Metrics struct {
	settle *prometheus.HistogramVec
}

// NewMetrics registers the worker's metrics with reg:
//
//	idem_unknown_settle_seconds{operation,method}  histogram: from an
//	    operation's creation to its settlement on evidence by the worker
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{settle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idem_unknown_settle_seconds",
		Help:    "Time from an operation's creation to its settlement on evidence by the recovery worker.",
		Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
	}, []string{"operation", "method"})}
	reg.MustRegister(m.settle)
	return m
}

// observe records a settlement, with an exemplar carrying ctx's trace_id
// when its span is sampled.
func (m *Metrics) observe(ctx context.Context, rec registry.Record, s effect.Settlement) {
	if m == nil {
		return
	}
	tracing.Observe(ctx, m.settle.WithLabelValues(rec.Operation, s.Method), max(0, time.Since(rec.CreatedAt).Seconds()))
}
