package console

import (
	"cmp"
	"html/template"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemkit/idem/internal/chart"
	"github.com/idemkit/idem/registry"
)

// reservationMetric is the histogram the status page's "Acceptance
// latency" chart draws: the middleware's reservation latency (package
// idemhttp), all label sets merged.
const reservationMetric = "idem_reservation_seconds"

// ageBucket is one bar of "UNKNOWN by age": the ages below below and
// at or above the previous bucket's.
type ageBucket struct {
	below time.Duration
	label string
}

// ageBuckets are the upper bounds of the status page's "UNKNOWN by age"
// bars; the last bar counts the older ones.
var ageBuckets = []ageBucket{
	{time.Minute, "< 1 min"},
	{5 * time.Minute, "1–5 min"},
	{15 * time.Minute, "5–15 min"},
	{time.Hour, "15–60 min"},
	{6 * time.Hour, "1–6 h"},
	{math.MaxInt64, "≥ 6 h"},
}

// unknownAges draws the ages of recs (since their creation, at now) as
// bars, one per ageBuckets entry, zeros included.
func unknownAges(recs []registry.Record, now time.Time) template.HTML {
	bars := make([]chart.Bar, len(ageBuckets))
	for i, b := range ageBuckets {
		bars[i].Label = b.label
	}
	for _, rec := range recs {
		age := now.Sub(rec.CreatedAt)
		i := slices.IndexFunc(ageBuckets, func(b ageBucket) bool { return age < b.below })
		bars[i].Count++
	}
	return chart.Bars("UNKNOWN operations by age", chart.Axes{X: "age since created (min, h)", Y: "operations, count"}, bars)
}

// acceptanceLatency gathers g and draws the reservationMetric histogram,
// merged over its label sets, as one bar per bucket (not cumulative)
// from the first bucket with observations to the last. Without a chart
// it returns a sentence saying why.
func acceptanceLatency(g prometheus.Gatherer) (template.HTML, string) {
	if g == nil {
		return "", "Not shown: the console was given no metrics to read (console.Config.Gatherer is nil)."
	}
	fams, err := g.Gather()
	if err != nil {
		return "", "Not shown: the metrics could not be gathered: " + err.Error()
	}
	i := slices.IndexFunc(fams, func(f *dto.MetricFamily) bool {
		return f.GetName() == reservationMetric && f.GetType() == dto.MetricType_HISTOGRAM
	})
	if i < 0 {
		return "", "No reservation has been timed since the server started: the metrics hold no " + reservationMetric + " histogram yet."
	}
	bounds, counts := mergeBuckets(fams[i].GetMetric())
	first := slices.IndexFunc(counts, func(c uint64) bool { return c > 0 })
	if first < 0 {
		return "", "No reservation has been timed since the server started."
	}
	last := len(counts) - 1
	for counts[last] == 0 {
		last--
	}
	var bars []chart.Bar
	for i := first; i <= last; i++ {
		bars = append(bars, chart.Bar{Label: chart.Bucket(bounds, i), Count: counts[i]})
	}
	return chart.Bars("Acceptance latency (reservation)", chart.Axes{X: "reservation time, bucket upper bound (s, ms, µs)", Y: "reservations, count"}, bars), ""
}

// mergeBuckets adds the histograms of ms bucket by bucket: it returns
// the finite upper bounds, ascending, and the observations in each
// bucket (not cumulative), with one more count for those above the last
// bound. Buckets of different label sets with the same bound are added;
// a histogram without a bucket at some bound counts nothing there.
func mergeBuckets(ms []*dto.Metric) ([]float64, []uint64) {
	per := map[float64]uint64{}
	var above uint64
	for _, m := range ms {
		h := m.GetHistogram()
		var prev uint64
		for _, b := range h.GetBucket() {
			if math.IsInf(b.GetUpperBound(), +1) {
				continue
			}
			c := b.GetCumulativeCount()
			per[b.GetUpperBound()] += c - min(prev, c)
			prev = max(prev, c)
		}
		above += h.GetSampleCount() - min(prev, h.GetSampleCount())
	}
	bounds := make([]float64, 0, len(per))
	for b := range per {
		bounds = append(bounds, b)
	}
	slices.SortFunc(bounds, cmp.Compare)
	counts := make([]uint64, 0, len(bounds)+1)
	for _, b := range bounds {
		counts = append(counts, per[b])
	}
	if len(bounds) == 0 {
		return nil, []uint64{above}
	}
	return bounds, append(counts, above)
}
