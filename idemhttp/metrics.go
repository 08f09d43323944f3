package idemhttp

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
)

// Metrics are the middleware's Prometheus metrics. A nil *Metrics records
// nothing. Safe for concurrent use.
type Metrics struct {
	requests    *prometheus.CounterVec
	shadow      *prometheus.CounterVec
	reservation *prometheus.HistogramVec
	inFlight    *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg:
//
//	idem_requests_total{operation, outcome}        executed, replayed, released, conflict, in_progress, …
//	idem_shadow_decisions_total{operation, decision} what enforce mode would have done
//	idem_reservation_seconds{operation}            latency of the acceptance point
//	idem_in_flight{operation}                      executions running in this process
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_requests_total",
			Help: "Idempotent requests by operation and outcome.",
		}, []string{"operation", "outcome"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_shadow_decisions_total",
			Help: "Decisions enforce mode would have taken, for operations in shadow mode.",
		}, []string{"operation", "decision"}),
		reservation: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_reservation_seconds",
			Help:    "Latency of the reservation (the acceptance point).",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
		}, []string{"operation"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_in_flight",
			Help: "Operations executing in this process.",
		}, []string{"operation"}),
	}
	reg.MustRegister(m.requests, m.shadow, m.reservation, m.inFlight)
	return m
}

func (m *Metrics) outcome(op, outcome string) {
	if m != nil {
		m.requests.WithLabelValues(op, outcome).Inc()
	}
}

func (m *Metrics) shadowDecision(op, decision string) {
	if m != nil {
		m.shadow.WithLabelValues(op, decision).Inc()
	}
}

func (m *Metrics) observeReservation(op string, d time.Duration) {
	if m != nil {
		m.reservation.WithLabelValues(op).Observe(d.Seconds())
	}
}

func (m *Metrics) inflight(op string, delta float64) {
	if m != nil {
		m.inFlight.WithLabelValues(op).Add(delta)
	}
}

// outcomeLabel is the outcome label of a refusal: its code in lower case.
func outcomeLabel(c idem.Code) string { return strings.ToLower(string(c)) }
