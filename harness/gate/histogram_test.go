package gate

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
)

func TestQuantileInterpolates(t *testing.T) {
	h := Histogram{Bounds: []float64{0.001, 0.002, 0.004}, Counts: []uint64{50, 30, 20, 0}}
	for _, c := range []struct{ q, want float64 }{
		{0.25, 0.0005}, // rank 25 of the first bucket's 50, from 0
		{0.5, 0.001},   // exactly the first bound
		{0.65, 0.0015}, // rank 65: 15 of 30 into (1 ms, 2 ms]
		{0.99, 0.0039}, // rank 99: 19 of 20 into (2 ms, 4 ms]
		{1.0, 0.004},   // the top of the last finite bucket
	} {
		if got := h.Quantile(c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	inf := Histogram{Bounds: []float64{0.001}, Counts: []uint64{1, 99}}
	if got := inf.Quantile(0.99); got != 0.001 {
		t.Errorf("quantile in the +Inf bucket = %v, want the last bound 0.001", got)
	}
	if got := (Histogram{}).Quantile(0.99); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}

func TestHistogramAdd(t *testing.T) {
	var total Histogram
	a := Histogram{Bounds: []float64{1, 2}, Counts: []uint64{1, 2, 3}, Sum: 10}
	if err := total.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := total.Add(a); err != nil {
		t.Fatal(err)
	}
	if total.Count() != 12 || total.Counts[2] != 6 || total.Sum != 20 {
		t.Errorf("sum of two: %+v", total)
	}
	if err := total.Add(Histogram{Bounds: []float64{1, 3}, Counts: []uint64{1, 1, 1}}); err == nil {
		t.Error("histograms with other bounds were merged")
	}
}

// TestReservationBucketsHoldTheLimit: 5 % of the default budget is a
// bucket bound, so the p99 gate decides exactly (histogram.go).
func TestReservationBucketsHoldTheLimit(t *testing.T) {
	limit := DefaultLatencyBudget.Seconds() * DefaultReservationPart
	for _, b := range idemhttp.ReservationBuckets() {
		if math.Abs(b-limit) < 1e-12 {
			return
		}
	}
	t.Errorf("no bucket bound at %v s in %v", limit, idemhttp.ReservationBuckets())
}

// TestParseReservations round-trips a histogram through the Prometheus
// text format as GET /metrics serves it, next to an operation that must
// be ignored.
func TestParseReservations(t *testing.T) {
	reg := prometheus.NewRegistry()
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ReservationMetric, Buckets: idemhttp.ReservationBuckets()}, []string{"operation"})
	reg.MustRegister(hv)
	obs := []float64{0.0003, 0.0009, 0.0009, 0.004, 0.0099, 0.011, 3}
	for _, v := range obs {
		hv.WithLabelValues(payments.OperationCreate).Observe(v)
	}
	hv.WithLabelValues("payments.other").Observe(0.5)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	h, err := ParseReservations(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if h.Count() != uint64(len(obs)) || h.Counts[len(h.Counts)-1] != 1 {
		t.Fatalf("parsed %+v; want %d observations, one above every bound", h, len(obs))
	}
	at := func(bound float64) uint64 {
		for i, b := range h.Bounds {
			if b == bound {
				return h.Counts[i]
			}
		}
		t.Fatalf("no bound %v", bound)
		return 0
	}
	if at(0.0004) != 1 || at(0.001) != 2 || at(0.005) != 1 || at(0.01) != 1 || at(0.0128) != 1 {
		t.Errorf("buckets %v %v", h.Bounds, h.Counts)
	}
	if _, err := ParseReservations(bytes.NewBufferString("# nothing\n")); err == nil {
		t.Error("text without the histogram parsed")
	}
}

// TestClientHistogram: the load's latencies land in the bucket whose
// bound is the first at or above them, the slowest in +Inf, and the
// snapshot keeps count and sum.
func TestClientHistogram(t *testing.T) {
	h := newClientHistogram()
	bounds := clientBounds()
	obs := []float64{0.00005, bounds[0], bounds[3] * 0.99, bounds[3] * 0.99, bounds[len(bounds)-1] + 1}
	for _, v := range obs {
		h.Observe(v)
	}
	s := snapshot(h)
	if !slices.Equal(s.Bounds, bounds) || len(s.Counts) != len(bounds)+1 {
		t.Fatalf("snapshot bounds %v, %d counts; want %v and one more count", s.Bounds, len(s.Counts), bounds)
	}
	want := make([]uint64, len(bounds)+1)
	want[0], want[3], want[len(bounds)] = 2, 2, 1
	var sum float64
	for _, v := range obs {
		sum += v
	}
	if !slices.Equal(s.Counts, want) || math.Abs(s.Sum-sum) > 1e-12 {
		t.Errorf("counts %v sum %v; want %v sum %v", s.Counts, s.Sum, want, sum)
	}
}
