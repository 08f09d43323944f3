package check

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Status is a scenario's verdict.
type Status string

// Verdicts.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped" // could not apply; never counts as passed
	// Warned: the property does not hold, but nothing a retry relies on
	// broke (key-entropy); it neither passes nor fails the run.
	Warned Status = "warning"
)

// Result is the outcome of one scenario.
type Result struct {
	Name     string `json:"name"`
	Property string `json:"property"`
	Status   Status `json:"status"`
	Passed   bool   `json:"passed"`
	// Detail says why, in one line.
	Detail string `json:"detail"`
	// Evidence holds the answers or figures behind a verdict.
	Evidence []string `json:"evidence,omitempty"`
	// Statuses counts the answers by status (and problem code).
	Statuses   map[string]int `json:"statuses,omitempty"`
	Requests   int            `json:"requests"`
	DurationMS float64        `json:"duration_ms"`
	// Load holds the load scenario's figures.
	Load *LoadFigures `json:"load,omitempty"`
}

// LoadFigures are what the load scenario measured.
type LoadFigures struct {
	Keys          int     `json:"keys"`
	Requests      int     `json:"requests"`
	Concurrency   int     `json:"concurrency"`
	ThroughputRPS float64 `json:"throughput_rps"`
	P50MS         float64 `json:"p50_ms"`
	P99MS         float64 `json:"p99_ms"`
	MaxMS         float64 `json:"max_ms"`
	// DuplicateKeys is the number of keys with more than one resource.
	DuplicateKeys int `json:"duplicate_keys"`
	// UnsettledKeys is the number of keys without any 2xx answer.
	UnsettledKeys int `json:"unsettled_keys"`
}

func (r *Result) verdict(s Status, format string, a ...any) {
	if r.Status == Failed { // the first failure is the one named
		return
	}
	r.Status, r.Passed, r.Detail = s, s == Passed, fmt.Sprintf(format, a...)
}

func (r *Result) pass(format string, a ...any) { r.verdict(Passed, format, a...) }
func (r *Result) fail(format string, a ...any) { r.verdict(Failed, format, a...) }
func (r *Result) skip(format string, a ...any) { r.verdict(Skipped, format, a...) }
func (r *Result) warn(format string, a ...any) { r.verdict(Warned, format, a...) }

// note adds a line of evidence.
func (r *Result) note(format string, a ...any) {
	r.Evidence = append(r.Evidence, fmt.Sprintf(format, a...))
}

// tally counts the answers by status.
func (r *Result) tally(es ...exchange) {
	if r.Statuses == nil {
		r.Statuses = map[string]int{}
	}
	for _, e := range es {
		r.Statuses[e.statusText()]++
	}
}

// statusList is the tally as "201×1 409 IN_PROGRESS×49".
func statusList(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// Report is the outcome of a run.
type Report struct {
	// Target is the method and URL checked.
	Target string `json:"target"`
	// Passed: no scenario failed, and at least one passed or warned.
	Passed    bool      `json:"passed"`
	StartedAt time.Time `json:"started_at"`
	// DurationMS is the whole run's wall time.
	DurationMS float64  `json:"duration_ms"`
	Counts     Counts   `json:"counts"`
	Scenarios  []Result `json:"scenarios"`
	// Scorecards are the verdicts per profile (Config.Profile; strict
	// scores ietf too); none without a profile.
	Scorecards []Scorecard `json:"scorecards,omitempty"`
}

// Counts counts the scenarios by verdict.
type Counts struct {
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	// Warnings counts the scenarios that warned; they do not fail the run.
	Warnings int `json:"warnings"`
}

// Failed lists the names of the failed scenarios.
func (rep *Report) Failed() []string { return rep.named(Failed) }

// Warned lists the names of the scenarios that warned.
func (rep *Report) Warned() []string { return rep.named(Warned) }

func (rep *Report) named(st Status) []string {
	var names []string
	for _, s := range rep.Scenarios {
		if s.Status == st {
			names = append(names, s.Name)
		}
	}
	return names
}

// Result returns the result of the scenario named name, if it ran.
func (rep *Report) Result(name string) (Result, bool) {
	for _, s := range rep.Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Result{}, false
}

func (rep *Report) finish(start time.Time) {
	rep.DurationMS = ms(time.Since(start))
	rep.Counts = Counts{}
	for _, s := range rep.Scenarios {
		switch s.Status {
		case Passed:
			rep.Counts.Passed++
		case Failed:
			rep.Counts.Failed++
		case Warned:
			rep.Counts.Warnings++
		default:
			rep.Counts.Skipped++
		}
	}
	// A warning applied and broke no retry: it counts like a pass here.
	rep.Passed = rep.Counts.Failed == 0 && rep.Counts.Passed+rep.Counts.Warnings > 0
}

// WriteTable writes the human-readable report: a table with one row per
// scenario naming its property, then each scenario's detail and evidence,
// then the verdict.
func (rep *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "idem check %s\n\n", rep.Target)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tRESULT\tREQUESTS\tTIME\tPROPERTY")
	for _, s := range rep.Scenarios {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Name, strings.ToUpper(verdictWord(s.Status)), s.Requests,
			time.Duration(s.DurationMS*float64(time.Millisecond)).Round(time.Millisecond), s.Property)
	}
	tw.Flush()
	b.WriteString("\n")
	for _, s := range rep.Scenarios {
		fmt.Fprintf(&b, "%s: %s\n", s.Name, s.Detail)
		for _, e := range s.Evidence {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	verdict := "PASSED"
	if !rep.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "\n%s: %d passed, %d failed, %d skipped", verdict, rep.Counts.Passed, rep.Counts.Failed, rep.Counts.Skipped)
	if f := rep.Failed(); len(f) > 0 {
		fmt.Fprintf(&b, " (failed: %s)", strings.Join(f, ", "))
	}
	if w := rep.Warned(); len(w) > 0 {
		fmt.Fprintf(&b, ", %d warned (%s)", len(w), strings.Join(w, ", "))
	}
	fmt.Fprintf(&b, " in %s\n", time.Duration(rep.DurationMS*float64(time.Millisecond)).Round(time.Millisecond))
	rep.writeScorecards(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func verdictWord(s Status) string {
	switch s {
	case Passed:
		return "pass"
	case Failed:
		return "fail"
	case Warned:
		return "warn"
	}
	return "skip"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// list joins at most n of s, saying how many were left out.
func list(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:n], ", ") + fmt.Sprintf(", … (%d more)", len(s)-n)
}
