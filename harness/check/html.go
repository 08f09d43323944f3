package check

import (
	_ "embed"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/idemkit/idem/internal/chart"
)

//go:embed report.html
var reportHTML string

var reportTmpl = template.Must(template.New("report").Parse(reportHTML))

// WriteHTML writes the report as one self-contained HTML page (inline CSS
// and SVG, no scripts, no external assets): the verdict, every scenario
// with its evidence, and two charts drawn by the same code as the gate's
// report and the operator console (internal/chart) — the answers of all
// scenarios by status (and problem code), and each scenario's time;
// failed scenarios' bars are red.
func (rep *Report) WriteHTML(w io.Writer) error {
	statuses := map[string]int{}
	for _, s := range rep.Scenarios {
		for k, n := range s.Statuses {
			statuses[k] += n
		}
	}
	var byStatus []chart.Bar
	for _, k := range slices.Sorted(maps.Keys(statuses)) {
		byStatus = append(byStatus, chart.Bar{Label: k, Count: uint64(statuses[k])})
	}
	var durations []chart.Bar
	for _, s := range rep.Scenarios {
		durations = append(durations, chart.Bar{Label: s.Name, Count: uint64(math.Round(max(s.DurationMS, 0))), Alert: s.Status == Failed})
	}
	return reportTmpl.Execute(w, map[string]any{
		"R":           rep,
		"Seconds":     rep.DurationMS / 1000,
		"StatusSVG":   chart.Bars("Answers by status, all scenarios", chart.Axes{X: "HTTP status and code", Y: "answers, count"}, byStatus),
		"DurationSVG": chart.Bars("Time per scenario, ms", chart.Axes{X: "scenario", Y: "duration, ms"}, durations),
	})
}
