package gate

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReportProblemsCapped: the answers' and the verification's problems
// together stay within maxProblems, the clients' first, while the
// counters count them all.
func TestReportProblemsCapped(t *testing.T) {
	plan := NewPlan(maxProblems+5, 2, 2, 0, 0, 1)
	res := LoadResult{Keys: make([]KeyResult, len(plan.Keys))}
	for i := range res.Keys {
		res.Keys[i] = KeyResult{Done: true, FalseConflicts: 1}
	}
	var v Verification
	for i := range maxProblems + 5 {
		v.problem("verification problem %d", i)
	}
	r := NewReport(Config{Seed: 1}, plan, res, v, Histogram{})
	if len(r.Problems) != maxProblems || r.FalseConflicts != len(plan.Keys) {
		t.Fatalf("%d problems (want %d), %d false conflicts (want %d)", len(r.Problems), maxProblems, r.FalseConflicts, len(plan.Keys))
	}
	if want := "key 0: 1 false PAYLOAD_CONFLICT for an identical payload"; r.Problems[0] != want {
		t.Errorf("first problem %q, want %q", r.Problems[0], want)
	}
	if r.Passed {
		t.Error("a report with false conflicts passed")
	}
}

// TestReportHTMLCharts: the HTML report draws the reservation histogram
// (package internal/chart) from its first bucket with observations to
// its last, the limit as a line after its bucket and the buckets above
// it red; a histogram without observations says so.
func TestReportHTMLCharts(t *testing.T) {
	r := &Report{LatencyBudgetMs: 200, ReservationHistogram: Histogram{
		Bounds: []float64{0.001, 0.005, 0.01, 0.02},
		Counts: []uint64{0, 4, 2, 1, 0},
	}}
	var page strings.Builder
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	bars := regexp.MustCompile(`<rect class="(bar[^"]*)" data-label="([^"]*)" data-count="(\d+)"`).FindAllStringSubmatch(page.String(), -1)
	var got []string
	for _, b := range bars {
		got = append(got, b[1]+" "+b[2]+" "+b[3])
	}
	if want := []string{"bar ≤ 5ms 4", "bar ≤ 10ms 2", "bar over ≤ 20ms 1"}; !slices.Equal(got, want) {
		t.Errorf("bars %q; want %q", got, want)
	}
	if !strings.Contains(page.String(), ">limit ≤ 10ms<") || strings.Count(page.String(), `class="limit"`) != 1 {
		t.Errorf("the report draws no limit line at 10ms:\n%s", page.String())
	}
	if !strings.Contains(page.String(), "(no observations)") {
		t.Error("the empty client histogram is not said to have no observations")
	}
}

// TestReportStatesRules: each gate's rule stands beside its value, in
// the text and the HTML report; a ratio's rule says what it means in the
// run's units (reservation_budget_ratio: the p99 and the budget).
//
// threat:unreadable-chart
func TestReportStatesRules(t *testing.T) {
	r := NewReport(Config{Seed: 1, LatencyBudget: 200e6}, NewPlan(4, 2, 2, 0, 0, 1), LoadResult{Keys: make([]KeyResult, 4)}, Verification{}, Histogram{})
	r.ReservationBudgetRatio = 0.31
	r.decide()
	const rule = "rule: ≤ 0.05 (reservation p99 ≤ 10ms of the 200ms latency budget)"
	var text, page strings.Builder
	r.WriteText(&text)
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`reservation_budget_ratio\s+0\.31\s+— ` + regexp.QuoteMeta(rule)).MatchString(text.String()) {
		t.Errorf("the text report does not state the rule beside the value:\n%s", text.String())
	}
	if !regexp.MustCompile(`<td>reservation_budget_ratio</td><td class="n">0\.31</td><td class="rule">` + regexp.QuoteMeta(rule) + `</td>`).MatchString(page.String()) {
		t.Errorf("the HTML report does not state the rule beside the value")
	}
	for _, g := range r.Gates {
		if !strings.Contains(text.String(), g.Name) || !strings.Contains(text.String(), "— rule: "+g.Rule()) {
			t.Errorf("gate %s: no rule in the text report", g.Name)
		}
	}
}
