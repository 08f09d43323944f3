package gate

import (
	_ "embed"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/chart"
)

//go:embed report.html
var reportHTML string

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{"pct": func(x float64) float64 { return 100 * x }}).Parse(reportHTML))

type outcome struct {
	Name  string
	Value int64
}

// WriteHTML writes the report as one self-contained HTML page (inline
// CSS and SVG, no scripts, no external assets): the gates, the outcome
// counts and both latency histograms.
func (r *Report) WriteHTML(w io.Writer) error {
	v := r.Verification
	outcomes := []outcome{
		{"keys answered 201 (payment created)", int64(r.Succeeded)},
		{"keys answered 422 AMOUNT_LIMIT (stored refusal)", int64(r.Refused)},
		{"terminal answers", int64(v.TerminalAnswers)},
		{"of which replays (Idempotent-Replayed)", int64(r.Replays)},
		{"different payloads sent", int64(r.ConflictsSent)},
		{"different payloads refused with PAYLOAD_CONFLICT", int64(r.ConflictsRefused)},
		{"false PAYLOAD_CONFLICT", int64(r.FalseConflicts)},
		{"OUTCOME_UNKNOWN answers", int64(r.UnknownAnswers)},
		{"requests without a terminal answer", int64(r.UnansweredRequests)},
		{"unexpected answers", int64(r.UnexpectedAnswers)},
		{"operations in the registry", int64(v.Operations)},
		{"payment rows", int64(v.PaymentRows)},
		{"outbox messages", int64(v.OutboxRows)},
		{"duplicate payment rows", int64(v.DuplicatePayments)},
		{"duplicate outbox messages", int64(v.DuplicateOutbox)},
		{"succeeded operations missing an effect", int64(v.MissingEffects)},
		{"terminal answers differing from the stored response", int64(v.DigestMismatches)},
		{"keys whose acknowledged operation was lost", int64(v.AcknowledgedLost)},
		{"keys executed again (two operation IDs answered)", int64(v.ReExecuted)},
		{"keys re-sent after the load", int64(r.ResentKeys)},
		{"stored responses failing their digest", int64(v.CorruptSnapshots)},
		{"operations UNKNOWN past the recovery SLO", int64(v.UnknownPastSLO)},
		{"operations still in flight after recovery", int64(v.InFlight)},
	}
	if r.Workload == WorkloadTransfers {
		// POST /v1/transfers: the effects are the provider's executions.
		outcomes = slices.DeleteFunc(outcomes, func(o outcome) bool {
			return strings.Contains(o.Name, "payment") || strings.Contains(o.Name, "outbox")
		})
		outcomes = append(outcomes,
			outcome{"keys answered 2xx (transfer executed)", int64(r.Succeeded)},
			outcome{"keys answered another stored 422 (declined)", int64(r.Declined)},
			outcome{"provider executions for the run's payees", int64(v.ProviderExecutions)},
			outcome{"keys with more than one execution", int64(v.DuplicateTransfers)},
			outcome{"refused or declined keys with an execution", int64(v.DeclinedExecuted)},
			outcome{"records storing a 5xx response", int64(v.Stored5xx)},
			outcome{"keys without a definite answer within the unknown SLO", int64(v.UnknownPastSLO)},
		)
		if l := r.Late; l != nil {
			outcomes = append(outcomes,
				outcome{"late-settled operations (UNKNOWN longer than the retention)", int64(l.Settled)},
				outcome{"late-settled operations replayed after a prune pass", int64(l.Replayed)},
				outcome{"late-settled operations answered KEY_RETIRED", int64(l.Retired)},
				outcome{"late-settled operations executed again", int64(l.Executed)},
				outcome{"late-settled operations answered otherwise", int64(l.Other)},
				outcome{"late-settled operations not judged in time", int64(l.Unjudged)},
				outcome{"answered keys whose record retired during the run", int64(v.RetiredKeys)},
			)
		}
		for _, m := range slices.Sorted(maps.Keys(r.Faults)) {
			outcomes = append(outcomes, outcome{"provider fault phases " + m, int64(r.Faults[m])},
				outcome{"requests decided by " + m, int64(r.FaultRequests[m])})
		}
	}
	if ro := r.Rollout; ro != nil {
		// The storm's database figures do not apply: the rollout
		// phase's verification has its own.
		rv := ro.Verification
		outcomes = slices.DeleteFunc(outcomes[:10:10], func(o outcome) bool { return o.Name == "terminal answers" })
		outcomes = append(outcomes,
			outcome{"operations in the registry", int64(rv.Operations)},
			outcome{"payment rows", int64(rv.PaymentRows)},
			outcome{"outbox messages", int64(rv.OutboxRows)},
			outcome{"payment rows executed in shadow before enforce (by design)", int64(rv.ShadowExecutions)},
			outcome{"duplicate effects (rows beyond the attempts sent before enforce)", int64(rv.DuplicateEffects)},
			outcome{"answers after enforce matching the stored answer", int64(rv.ReplaysAfterEnforce)},
			outcome{"answers changed", int64(rv.AnswersChanged)},
			outcome{"different payloads accepted after enforce", int64(rv.ConflictsAccepted)},
			outcome{"succeeded operations missing an effect", int64(rv.MissingEffects)},
			outcome{"operations still in flight after recovery", int64(rv.InFlight)},
		)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Resends)) {
		outcomes = append(outcomes, outcome{"re-sent after " + k, r.Resends[k]})
	}
	return reportTmpl.Execute(w, map[string]any{
		"R":              r,
		"Outcomes":       outcomes,
		"ReservationSVG": histogramSVG("Reservation latency, server side", r.ReservationHistogram, r.LatencyBudgetMs*DefaultReservationPart/1000),
		"ClientSVG":      histogramSVG("Request latency, client side", r.ClientHistogram, 0),
	})
}

// histogramSVG draws h as bars (package internal/chart), one per bucket
// with observations between the first and the last such bucket, labelled
// with the bucket's upper bound; limit (seconds, 0: none) is drawn as a
// dashed line at the bound it equals or falls below, and bars above it
// are red.
func histogramSVG(title string, h Histogram, limit float64) template.HTML {
	if h.Count() == 0 || len(h.Counts) != len(h.Bounds)+1 {
		return template.HTML("<p>(no observations)</p>")
	}
	first, last := -1, -1
	for i, c := range h.Counts {
		if c > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	within := func(i int) bool { return i < len(h.Bounds) && h.Bounds[i] <= limit*1.000001 }
	var bars []chart.Bar
	for i := first; i <= last; i++ {
		bar := chart.Bar{Label: chart.Bucket(h.Bounds, i), Count: h.Counts[i]}
		if limit > 0 {
			bar.Alert = !within(i)
			if within(i) && !within(i+1) {
				bar.Mark = "limit ≤ " + chart.Seconds(limit)
			}
		}
		bars = append(bars, bar)
	}
	return chart.Bars(title, chart.Axes{X: "latency, bucket upper bound (s, ms, µs)", Y: "requests, count"}, bars)
}
