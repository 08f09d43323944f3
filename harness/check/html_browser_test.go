package check

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/internal/browser"
)

// TestReportChartsReadable (issue 27): the charts of "idem check --html",
// drawn by Chromium 1,280 px wide, have an x-axis and a y-axis title
// each, and no two axis labels overlap — measured on the label boxes
// (getBoundingClientRect) of answers such as "400 KEY_INVALID" and "422
// PAYLOAD_CONFLICT" and of thirty scenarios with long names.
//
// threat:unreadable-chart
func TestReportChartsReadable(t *testing.T) {
	rep := &Report{Target: "POST http://127.0.0.1/v1/payments", StartedAt: time.Unix(1_800_000_000, 0)}
	codes := []string{"200", "201", "400 KEY_INVALID", "400 KEY_REQUIRED", "409 IN_PROGRESS", "415 UNSUPPORTED_MEDIA_TYPE",
		"422 PAYLOAD_CONFLICT", "428 KEY_REQUIRED", "503 STORE_UNAVAILABLE"}
	for i := range 30 {
		rep.Scenarios = append(rep.Scenarios, Result{Name: fmt.Sprintf("scenario-%02d-same-key-different-payload-after-expiry", i), Status: Passed,
			Statuses: map[string]int{codes[i%len(codes)]: i + 1}, DurationMS: float64(10 * (i + 1))})
	}
	var page strings.Builder
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(page.String()))
	}))
	t.Cleanup(srv.Close)
	ctx := browser.New(t)
	step, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(step, chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("svg text.label")), browser.Capture("check-report")); err != nil {
		t.Fatal(err)
	}
	charts, problems, err := browser.ChartProblems(step)
	if err != nil || charts != 2 {
		t.Fatalf("measuring the charts: %d charts, %v; want 2", charts, err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
