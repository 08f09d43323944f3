package console_test

import (
	"html"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// bar is one bar of a chart as the page shows it.
type bar struct {
	Label string
	Count uint64
}

var barRe = regexp.MustCompile(`<rect class="bar[^"]*" data-label="([^"]*)" data-count="(\d+)"`)

// chartBars returns the bars drawn in the element with id, and its HTML;
// it fails the test when the page has no such element.
func chartBars(t *testing.T, body, id string) ([]bar, string) {
	t.Helper()
	m := regexp.MustCompile(`(?s)<figure id="` + id + `".*?</figure>`).FindString(body)
	if m == "" {
		t.Fatalf("the status page has no #%s: %s", id, body)
	}
	var bars []bar
	for _, b := range barRe.FindAllStringSubmatch(m, -1) {
		n, _ := strconv.ParseUint(b[2], 10, 64)
		bars = append(bars, bar{html.UnescapeString(b[1]), n})
	}
	return bars, m
}

// TestStatusUnknownAges: the UNKNOWN operations are counted by age, on
// both drivers, from records the store dated with an injected clock.
func TestStatusUnknownAges(t *testing.T) {
	t.Parallel()
	pgtest.EachDriver(t, "console.db", func(t *testing.T, _, dsn string) {
		var ago atomic.Int64 // the store's clock runs this far behind
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: func() time.Time {
			return time.Now().Add(-time.Duration(ago.Load()))
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		e := newEnv(t, store, effect.Answer{})
		c, _ := e.login(aliceToken)

		_, _, body := e.do(c, "/admin/", nil)
		empty, _ := chartBars(t, body, "unknown-ages")
		labels := []string{"< 1 min", "1–5 min", "5–15 min", "15–60 min", "1–6 h", "≥ 6 h"}
		if want := []bar{{labels[0], 0}, {labels[1], 0}, {labels[2], 0}, {labels[3], 0}, {labels[4], 0}, {labels[5], 0}}; !slices.Equal(empty, want) {
			t.Errorf("no UNKNOWN operation: bars %v; want %v", empty, want)
		}

		for _, age := range []time.Duration{10 * time.Second, 20 * time.Second, 3 * time.Minute, 30 * time.Minute,
			2 * time.Hour, 3 * time.Hour, 5 * time.Hour, 7 * time.Hour} {
			ago.Store(int64(age))
			e.unknown()
		}
		ago.Store(0)
		_, _, body = e.do(c, "/admin/", nil)
		got, _ := chartBars(t, body, "unknown-ages")
		want := []bar{{labels[0], 2}, {labels[1], 1}, {labels[2], 0}, {labels[3], 1}, {labels[4], 3}, {labels[5], 1}}
		if !slices.Equal(got, want) {
			t.Errorf("bars %v; want %v", got, want)
		}
		if !strings.Contains(body, `id="unknown-count">8<`) {
			t.Errorf("the status page does not count 8 UNKNOWN operations")
		}
	})
}

// TestStatusAcceptanceLatency: with a Gatherer, the reservation
// histogram's label sets are merged into bars of per-bucket counts, from
// the first bucket with observations to the last; without one, a
// sentence says why there is no chart.
func TestStatusAcceptanceLatency(t *testing.T) {
	t.Parallel()
	store, err := idemstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "console.db"), idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	reg := prometheus.NewRegistry()
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idem_reservation_seconds",
		Help:    "Latency of the reservation.",
		Buckets: []float64{0.0005, 0.001, 0.005, 0.01, 0.1},
	}, []string{"operation"})
	reg.MustRegister(hist)
	with := newEnv(t, store, effect.Answer{}, func(cfg *console.Config) { cfg.Gatherer = reg })
	c, _ := with.login(aliceToken)

	// No observation yet: a sentence.
	_, _, body := with.do(c, "/admin/", nil)
	if bars, fig := chartBars(t, body, "acceptance-latency"); len(bars) != 0 || !strings.Contains(fig, "No reservation has been timed") {
		t.Errorf("no observation yet: %s", fig)
	}

	for _, o := range []struct {
		op string
		s  float64
	}{{"a", 0.0008}, {"a", 0.0009}, {"b", 0.0007}, {"a", 0.003}, {"b", 0.05}, {"b", 0.06}, {"a", 2}} {
		hist.WithLabelValues(o.op).Observe(o.s)
	}
	_, _, body = with.do(c, "/admin/", nil)
	got, fig := chartBars(t, body, "acceptance-latency")
	want := []bar{{"≤ 1ms", 3}, {"≤ 5ms", 1}, {"≤ 10ms", 0}, {"≤ 100ms", 2}, {"> 100ms", 1}}
	if !slices.Equal(got, want) {
		t.Errorf("bars %v; want %v\n%s", got, want, fig)
	}

	without := newEnv(t, store, effect.Answer{})
	c, _ = without.login(aliceToken)
	_, _, body = without.do(c, "/admin/", nil)
	if bars, fig := chartBars(t, body, "acceptance-latency"); len(bars) != 0 || !strings.Contains(fig, `id="acceptance-latency-none"`) ||
		!strings.Contains(fig, "Config.Gatherer is nil") {
		t.Errorf("without a Gatherer: %s", fig)
	}
}
