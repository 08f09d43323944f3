package gate

import (
	"fmt"
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemkit/idem/example/payments"
)

// ReservationMetric is the histogram the reservation p99 is read from.
const ReservationMetric = "idem_reservation_seconds"

// ParseReservations reads Prometheus text exposition and returns the
// idem_reservation_seconds histogram of payments.create as per-bucket
// counts.
func ParseReservations(r io.Reader) (Histogram, error) {
	return ParseReservationsOf(r, payments.OperationCreate)
}

// ParseReservationsOf is ParseReservations for the operation named op
// (payments.OperationTransfer for the transfers workload).
func ParseReservationsOf(r io.Reader, op string) (Histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Histogram{}, err
	}
	fam, ok := fams[ReservationMetric]
	if !ok || fam.GetType() != dto.MetricType_HISTOGRAM {
		return Histogram{}, errNoHistogram
	}
	// One series per shard of a sharded instance (label shard): summed.
	var sum Histogram
	found := false
	for _, m := range fam.GetMetric() {
		if label(m, "operation") != op {
			continue
		}
		h, err := fromDTO(m.GetHistogram())
		if err != nil {
			return Histogram{}, err
		}
		if err := sum.Add(h); err != nil {
			return Histogram{}, err
		}
		found = true
	}
	if !found {
		return Histogram{}, errNoHistogram
	}
	return sum, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// fromDTO turns cumulative buckets into per-bucket counts; the +Inf bucket
// is the sample count minus the last finite bucket.
func fromDTO(h *dto.Histogram) (Histogram, error) {
	out := Histogram{Sum: h.GetSampleSum()}
	var prev uint64
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), +1) {
			continue
		}
		c := b.GetCumulativeCount()
		if c < prev {
			return Histogram{}, fmt.Errorf("bucket le=%g is not cumulative", b.GetUpperBound())
		}
		out.Bounds = append(out.Bounds, b.GetUpperBound())
		out.Counts = append(out.Counts, c-prev)
		prev = c
	}
	total := h.GetSampleCount()
	if total < prev {
		return Histogram{}, fmt.Errorf("sample count %d below the last bucket's %d", total, prev)
	}
	out.Counts = append(out.Counts, total-prev)
	return out, nil
}
