package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// TailReport is the outcome of a tail run (RunTail).
type TailReport struct {
	DB   string `json:"db"`
	Go   string `json:"go"`
	CPUs int    `json:"cpus"`
	Load *Load  `json:"load_average,omitempty"`
	// Pinning is where the processes ran; nil when they were not pinned.
	Pinning *Pinning `json:"pinning,omitempty"`
	// DBCPUMeasured says whether PostgreSQL's CPU is in the Queueing
	// figures (it runs on this machine and could be read).
	DBCPUMeasured   bool    `json:"db_cpu_measured"`
	Rounds          int     `json:"rounds"`
	DurationSeconds float64 `json:"duration_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	// Outstanding bounds the requests in flight of the open-loop cells.
	Outstanding int `json:"outstanding"`
	// TargetP99Ms is the default style's acceptance p99 target.
	TargetP99Ms float64 `json:"target_p99_ms"`
	// Cells holds the closed-loop cells (by client count: plain, default,
	// two-phase), then the open-loop ones in rate order.
	Cells []TailCell `json:"cells"`
}

// TailCell is one cell of a tail run: one style, closed-loop at a client
// count or open-loop at a rate. Latencies are in milliseconds, nearest
// rank over every answered request of every timed round; the open loop
// counts them from the scheduled send time.
type TailCell struct {
	// Style is "plain", "default" (the one-transaction style) or
	// "two-phase" (closed loop only).
	Style string `json:"style"`
	// Loop is "closed" or "open".
	Loop    string `json:"loop"`
	Clients int    `json:"clients,omitempty"`
	// RatePerS is an open loop's scheduled rate; RateOfMax the fraction
	// of the closed-loop maximum it was asked as, 0 if it was asked per
	// second.
	RatePerS  float64 `json:"rate_per_s,omitempty"`
	RateOfMax float64 `json:"rate_of_max,omitempty"`
	// RPS is the achieved rate, the median of the rounds (RoundsRPS).
	RPS       float64   `json:"rps"`
	RoundsRPS []float64 `json:"rounds_rps"`
	// Requests were answered, of Scheduled sent or scheduled; Late of
	// them found every outstanding slot busy at their scheduled time
	// (open loop; 0 closed).
	Requests  int     `json:"requests"`
	Scheduled int64   `json:"scheduled"`
	Late      int64   `json:"late"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	// AcceptP50Ms and AcceptP99Ms are the default style's acceptance time
	// (Result.OneTxAcceptanceP99Ms's measure) over Acceptances requests;
	// zero for the other styles.
	AcceptP50Ms float64 `json:"accept_p50_ms"`
	AcceptP99Ms float64 `json:"accept_p99_ms"`
	Acceptances int     `json:"acceptances"`
	// The acceptance split in two, over the same requests: the scope
	// lookup (which waits for a connection of the acceptance lane) and the
	// rest (the record insert and the durable COMMIT it shares with the
	// business rows).
	LookupP50Ms float64 `json:"lookup_p50_ms"`
	LookupP99Ms float64 `json:"lookup_p99_ms"`
	CommitP50Ms float64 `json:"commit_p50_ms"`
	CommitP99Ms float64 `json:"commit_p99_ms"`
	// Queueing is the cell's Little's-law account.
	Queueing Queueing `json:"queueing"`
}

// Misses lists the default-style cells whose acceptance p99 exceeded the
// target.
func (rep *TailReport) Misses() []string {
	var m []string
	for _, c := range rep.Cells {
		if c.Style == styleDefault && c.AcceptP99Ms > rep.TargetP99Ms {
			m = append(m, fmt.Sprintf("%s: acceptance p99 %.2f ms > %.0f ms", c.label(), c.AcceptP99Ms, rep.TargetP99Ms))
		}
	}
	return m
}

// label names the cell: "default, 64 clients" or "default, 700/s (50%)".
func (c TailCell) label() string {
	if c.Loop == "closed" {
		return fmt.Sprintf("%s, %d clients", c.Style, c.Clients)
	}
	if c.RateOfMax > 0 {
		return fmt.Sprintf("%s, %.0f/s (%.0f%%)", c.Style, c.RatePerS, 100*c.RateOfMax)
	}
	return fmt.Sprintf("%s, %.0f/s", c.Style, c.RatePerS)
}

// WriteTable writes the report for people: settings and pinning, the
// latency table, and the Little's-law table.
func (rep *TailReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "idem bench --tail: %s, %s, %d CPUs", rep.DB, rep.Go, rep.CPUs)
	if rep.Load != nil {
		fmt.Fprintf(w, ", load average %.2f at the start and %.2f at the end", rep.Load.Start, rep.Load.End)
	}
	fmt.Fprintf(w, "\n%d rounds of %s per cell (warm-up %s); open loop: at most %d in flight\n",
		rep.Rounds, seconds(rep.DurationSeconds), seconds(rep.WarmupSeconds), rep.Outstanding)
	if rep.Pinning != nil {
		fmt.Fprintf(w, "pinned: %s\n", rep.Pinning)
	} else {
		fmt.Fprintln(w, "not pinned: every process on every CPU")
	}

	fmt.Fprint(w, "\nlatency ms (open loop: from the scheduled send), acceptance ms (default style)\n"+
		"and its two parts p50/p99: lookup, then insert and COMMIT\n")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\treq/s\tlate\tp50\tp99\tp99.9\taccept p50\taccept p99\tlookup\tcommit\t")
	for _, c := range rep.Cells {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%s\t%s\t%s\t\n", c.label(), c.RPS, c.Late,
			c.P50Ms, c.P99Ms, c.P999Ms, c.AcceptP50Ms, rep.accept(c),
			pair(c, c.LookupP50Ms, c.LookupP99Ms), pair(c, c.CommitP50Ms, c.CommitP99Ms))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprint(w, "\nLittle's law: L = λW; per request, CPU ms and run-queue wait ms of the bench process\n"+
		"(servers + load) and of PostgreSQL; U = λ × demand ÷ CPUs, machine = all CPUs busy\n"+
		"(everyone's work); bound = N × demand ÷ CPUs; pool: mean wait ms and mean number waiting\n")
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\tL\tλ/s\tW ms\tcpu b\tcpu db\twait b\twait db\tU\tmach\tbound\tpool\t")
	for _, c := range rep.Cells {
		q := c.Queueing
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f/%.1f\t\n",
			c.label(), q.L, q.Lambda, q.WMs, q.BenchCPUMs, q.DBCPUMs, q.BenchWaitMs, q.DBWaitMs,
			q.Utilisation, q.MachineBusy, q.BoundMs, q.PoolWaitMs, q.PoolWaiting)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !rep.DBCPUMeasured {
		fmt.Fprintln(w, "PostgreSQL's CPU was not measured (not on this machine, or not readable): db columns are 0.")
	}
	m := rep.Misses()
	if len(m) == 0 {
		_, err := fmt.Fprintf(w, "\nEvery default-style cell met the acceptance p99 target of %.0f ms.\n", rep.TargetP99Ms)
		return err
	}
	_, err := fmt.Fprintf(w, "\nAcceptance p99 target %.0f ms missed:\n", rep.TargetP99Ms)
	for _, miss := range m {
		if err != nil {
			break
		}
		_, err = fmt.Fprintf(w, "  %s\n", miss)
	}
	return err
}

// accept is a cell's acceptance p99 with its mark, "-" for plain.
func (rep *TailReport) accept(c TailCell) string {
	if c.Style != styleDefault {
		return "-"
	}
	return fmt.Sprintf("%.2f %s", c.AcceptP99Ms, mark(c.AcceptP99Ms <= rep.TargetP99Ms))
}

// pair is "p50/p99" of a default-style cell, "-" for the other styles.
func pair(c TailCell, p50, p99 float64) string {
	if c.Style != styleDefault {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1f", p50, p99)
}
