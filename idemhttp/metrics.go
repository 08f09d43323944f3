package idemhttp

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/tracing"
)

// Metrics are the middleware's Prometheus metrics. A nil *Metrics records
// nothing. Safe for concurrent use.
type Metrics struct {
	requests    *prometheus.CounterVec
	verdicts    *prometheus.CounterVec
	reservation *prometheus.HistogramVec
	inFlight    *prometheus.GaugeVec
	joined      *prometheus.CounterVec
	tampered    *prometheus.CounterVec
	cacheHits   *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg:
//
//	idem_requests_total{operation, outcome}        executed, replayed, released, conflict, in_progress, client_gone, …
//	idem_rollout_verdicts_total{operation, mode, verdict} what enforce answered (mode enforce) or would have answered (mode shadow): execute, replay, conflict, in_flight, key_refused, key_retired, refused
//	idem_reservation_seconds{operation}            latency of the acceptance point
//	idem_in_flight{operation}                      executions running in this process
//	idem_joined_total{operation}                   requests that waited for an execution of their key in this process
//	idem_tampered_total{operation}                 stored bodies refused because they fail authentication (registry.ErrTampered)
//	idem_replay_cache_hits_total{operation}        requests answered from the replay cache (Operation.ReplayCache) without reading the registry
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_requests_total",
			Help: "Idempotent requests by operation and outcome.",
		}, []string{"operation", "outcome"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_rollout_verdicts_total",
			Help: "Requests by the verdict enforce answered (mode enforce) or would have answered (mode shadow). Per tenant in the registry (idem rollout report).",
		}, []string{"operation", "mode", "verdict"}),
		reservation: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_reservation_seconds",
			Help:    "Latency of the reservation (the acceptance point).",
			Buckets: ReservationBuckets(),
		}, []string{"operation"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idem_in_flight",
			Help: "Operations executing in this process.",
		}, []string{"operation"}),
	}
	m.joined = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_joined_total",
		Help: "Requests that waited for an execution of the same key in this process instead of running the handler (one-transaction) or answering 409 IN_PROGRESS (two-phase).",
	}, []string{"operation"})
	m.tampered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_tampered_total",
		Help: "Stored bodies refused (503 RESPONSE_UNREADABLE) because they are not sealed for their record under the key ring: plaintext, edited or moved — a sign that someone wrote to the database.",
	}, []string{"operation"})
	m.cacheHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_replay_cache_hits_total",
		Help: "Requests answered from the replay cache (a replay, or a conflict) without reading the registry; 0 while the cache is off.",
	}, []string{"operation"})
	reg.MustRegister(m.requests, m.verdicts, m.reservation, m.inFlight, m.joined, m.tampered, m.cacheHits)
	return m
}

// ReservationBuckets are the upper bounds (seconds) of
// idem_reservation_seconds: 0.2 ms doubling up to about 1.6 s, plus
// 1, 2.5, 5, 7.5, 10, 15, 20 and 50 ms, so that a quantile can be checked
// exactly against 5 % of the usual latency budgets (10 ms of 200 ms, 5 ms
// of 100 ms, 2.5 ms of 50 ms): a quantile interpolated within its bucket
// lies on the same side of a bucket bound as the true one.
func ReservationBuckets() []float64 {
	b := append(prometheus.ExponentialBuckets(0.0002, 2, 14), 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.05)
	slices.Sort(b)
	return slices.Compact(b)
}

func (m *Metrics) outcome(op, outcome string) {
	if m != nil {
		m.requests.WithLabelValues(op, outcome).Inc()
	}
}

func (m *Metrics) tamper(op string) {
	if m != nil {
		m.tampered.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) join(op string) {
	if m != nil {
		m.joined.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) cacheHit(op string) {
	if m != nil {
		m.cacheHits.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) verdict(op, mode, verdict string) {
	if m != nil {
		m.verdicts.WithLabelValues(op, mode, verdict).Inc()
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

// observer is Metrics as the core's operation.Observer; a nil Metrics
// observes nothing.
type observer struct{ m *Metrics }

func (o observer) Outcome(op, outcome string)                    { o.m.outcome(op, outcome) }
func (o observer) Tamper(op string)                              { o.m.tamper(op) }
func (o observer) Join(op string)                                { o.m.join(op) }
func (o observer) ObserveReservation(op string, d time.Duration) { o.m.observeReservation(op, d) }

// ObserveReservationContext observes d with an exemplar carrying ctx's
// trace_id when its span is sampled (operation.ReservationObserver).
func (o observer) ObserveReservationContext(ctx context.Context, op string, d time.Duration) {
	if o.m != nil {
		tracing.Observe(ctx, o.m.reservation.WithLabelValues(op), d.Seconds())
	}
}
func (o observer) Inflight(op string, delta float64) { o.m.inflight(op, delta) }

// ReplayCacheHit counts a request answered from the replay cache
// (operation.ReplayCacheObserver).
func (o observer) ReplayCacheHit(op string) { o.m.cacheHit(op) }
