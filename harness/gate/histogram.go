package gate

import (
	"fmt"
	"math"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Histogram is a latency histogram with fixed upper bounds in seconds,
// like a Prometheus histogram: Counts[i] counts observations in
// (Bounds[i-1], Bounds[i]], and the last count those above the last bound
// (the +Inf bucket), so len(Counts) == len(Bounds)+1.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Sum    float64   `json:"sum"`
}

// Count is the number of observations.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) in seconds the way
// Prometheus' histogram_quantile does: it finds the bucket holding the
// observation of rank q·count and interpolates linearly between the
// bucket's lower and upper bound (the first bucket's lower bound is 0). If
// that rank falls in the +Inf bucket it returns the last finite bound.
// It is NaN when there are no observations.
//
// The bound of a gate should be one of the bucket bounds: the interpolated
// value then lies on the same side of the bound as the true quantile, so
// the pass/fail decision is exact whatever the interpolation error.
//
// Written here because the module's Prometheus dependencies have no
// quantile function for bucket counts (that lives in the promql engine).
func (h Histogram) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 || len(h.Counts) != len(h.Bounds)+1 {
		return math.NaN()
	}
	rank := q * float64(total)
	var cum float64
	for i, c := range h.Counts {
		prev := cum
		cum += float64(c)
		if cum < rank || c == 0 {
			continue
		}
		if i == len(h.Bounds) {
			return h.Bounds[len(h.Bounds)-1]
		}
		lower := 0.0
		if i > 0 {
			lower = h.Bounds[i-1]
		}
		return lower + (h.Bounds[i]-lower)*(rank-prev)/float64(c)
	}
	return h.Bounds[len(h.Bounds)-1]
}

// Add adds o's counts to h. An empty h (no bounds) takes o's bounds;
// otherwise the bounds must be equal (the instances of one run are one
// binary), else Add returns an error and leaves h unchanged.
func (h *Histogram) Add(o Histogram) error {
	if len(o.Counts) != len(o.Bounds)+1 {
		return fmt.Errorf("gate: histogram with %d bounds and %d counts", len(o.Bounds), len(o.Counts))
	}
	if len(h.Bounds) == 0 && len(h.Counts) == 0 {
		h.Bounds = append([]float64(nil), o.Bounds...)
		h.Counts = make([]uint64, len(o.Counts))
	}
	if !slices.Equal(h.Bounds, o.Bounds) {
		return fmt.Errorf("gate: histograms with different bucket bounds cannot be merged")
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.Sum += o.Sum
	return nil
}

// clientBounds are the bounds of the client latency histogram: 0.1 ms to
// about 105 s, a factor √2 apart.
func clientBounds() []float64 {
	b := make([]float64, 41)
	for i := range b {
		b[i] = 0.0001 * math.Pow(2, float64(i)/2)
	}
	return b
}

// newClientHistogram returns the histogram Load records the client
// latency in (seconds, over clientBounds): a Prometheus histogram, safe
// for concurrent use, never registered or exposed.
func newClientHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_gate_client_seconds", Buckets: clientBounds()})
}

// snapshot returns h's observations so far as per-bucket counts.
func snapshot(h prometheus.Histogram) Histogram {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return Histogram{} // a histogram's Write does not fail
	}
	out, err := fromDTO(m.GetHistogram())
	if err != nil {
		return Histogram{} // nor are its buckets ever not cumulative
	}
	return out
}
