package chart_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/browser"
	"github.com/idemkit/idem/internal/chart"
)

// TestBarsReadable (issue 27): drawn by Chromium, charts of every shape
// — three bars with long labels, twelve latency buckets, a hundred
// buckets (more than upright labels can fit side by side), sixty long
// labels — have both axis titles and no two labels whose boxes overlap
// (browser.ChartProblems).
//
// threat:unreadable-chart
func TestBarsReadable(t *testing.T) {
	bounds := func(n int) []float64 {
		b := make([]float64, n)
		for i := range b {
			b[i] = 0.0001 * float64(i+1) * float64(i+1)
		}
		return b
	}
	buckets := func(n int) []chart.Bar {
		bs := bounds(n - 1)
		var bars []chart.Bar
		for i := range n {
			bars = append(bars, chart.Bar{Label: chart.Bucket(bs, i), Count: uint64(i*7%13 + 1)})
		}
		return bars
	}
	var long []chart.Bar
	for i := range 60 {
		long = append(long, chart.Bar{Label: fmt.Sprintf("422 PAYLOAD_CONFLICT of scenario %d, a long one", i), Count: uint64(i + 1)})
	}
	ax := chart.Axes{X: "latency, bucket upper bound (ms)", Y: "requests, count"}
	var page strings.Builder
	page.WriteString(`<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>charts</title></head><body>`)
	for _, c := range []struct {
		title string
		bars  []chart.Bar
	}{
		{"three", []chart.Bar{{Label: "400 KEY_INVALID", Count: 3}, {Label: "422 PAYLOAD_CONFLICT", Count: 2}, {Label: "201", Count: 50}}},
		{"twelve", buckets(12)},
		{"hundred", buckets(100)},
		{"sixty long", long},
	} {
		page.WriteString(`<div>` + string(chart.Bars(c.title, ax, c.bars)) + `</div>`)
	}
	page.WriteString(`</body></html>`)
	browser.CheckCharts(t, page.String(), "charts", 4)
}
