package check

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
	browser.CheckCharts(t, page.String(), "check-report", 2)
}
