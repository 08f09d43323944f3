package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// EffectsReport is the outcome of RunEffects.
type EffectsReport struct {
	// DB, Go, CPUs, Load, Rounds, DurationSeconds and WarmupSeconds are
	// as in Report.
	DB   string `json:"db"`
	Go   string `json:"go"`
	CPUs int    `json:"cpus"`
	// DBCPUMeasured says whether EffectFigures.DBCPUMicros was measured:
	// PostgreSQL on this machine, its processes readable (Linux).
	DBCPUMeasured   bool    `json:"db_cpu_measured"`
	Load            *Load   `json:"load_average,omitempty"`
	Rounds          int     `json:"rounds"`
	DurationSeconds float64 `json:"duration_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	// Target is the least transfers ÷ floor expected at TargetClients
	// clients on PostgreSQL, at every latency (EffectTarget).
	Target        float64 `json:"target"`
	TargetClients int     `json:"target_clients"`
	// Results holds one entry per latency and client count, latencies in
	// Config.Latencies order, client counts in Config.Clients order
	// within each.
	Results []EffectResult `json:"results"`
	// Requests counts the requests answered 201 per variant
	// ("effect_plain", "effect_floor", "transfers", "transfers_2p"),
	// warm-ups included;
	// Executed is how many transfers the providers executed, and
	// FloorRows how many floor rows hold an answer: in a run that worked
	// Executed is the sum of Requests and FloorRows the floor's count —
	// every request paid once, none twice.
	Requests  map[string]int64 `json:"requests"`
	Executed  int64            `json:"executed"`
	FloorRows int64            `json:"floor_rows"`
}

// EffectResult is one latency's and client count's figures.
type EffectResult struct {
	// LatencyMs is the provider's latency.
	LatencyMs float64       `json:"latency_ms"`
	Clients   int           `json:"clients"`
	Plain     EffectFigures `json:"plain"`
	Floor     EffectFigures `json:"floor"`
	Transfers EffectFigures `json:"transfers"`
	// TransfersTwoPhase is transfers in the two-phase style, the
	// one-transaction style's "before".
	TransfersTwoPhase EffectFigures `json:"transfers_2p"`
	// TransfersFloorRatio, TransfersPlainRatio, FloorPlainRatio and
	// TwoPhaseFloorRatio are ratios of the median throughputs.
	TransfersFloorRatio float64 `json:"transfers_floor_ratio"`
	TwoPhaseFloorRatio  float64 `json:"transfers_2p_floor_ratio"`
	TransfersPlainRatio float64 `json:"transfers_plain_ratio"`
	FloorPlainRatio     float64 `json:"floor_plain_ratio"`
}

// EffectFigures are one variant's figures in one cell.
type EffectFigures struct {
	// RPS is the median over the rounds of RoundsRPS, the requests per
	// second of each round.
	RPS       float64   `json:"rps"`
	RoundsRPS []float64 `json:"rounds_rps"`
	// P50Ms and P99Ms are the client-side request latency quantiles
	// (nearest rank) over the Timed requests of every round.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	Timed int     `json:"timed"`
	// CommitsPerOp (transactions that wrote: transaction IDs assigned)
	// and WALBytesPerOp are medians over the rounds, PostgreSQL only
	// (nil elsewhere), cluster-wide.
	CommitsPerOp  *float64 `json:"commits_per_op,omitempty"`
	WALBytesPerOp *float64 `json:"wal_bytes_per_op,omitempty"`
	// ProcessCPUMicros is the CPU time per request of this process — the
	// servers, the demo provider and the load generator, all in it — and
	// DBCPUMicros that of PostgreSQL's processes (0 unless
	// EffectsReport.DBCPUMeasured), both from Linux's per-thread
	// schedstat; MachineBusy is the share of the machine's CPU time that
	// was busy, whoever's. Medians over the rounds. Where MachineBusy is
	// near 1 the variant is CPU-bound, and its throughput ratios follow
	// the CPU per request.
	ProcessCPUMicros float64 `json:"process_cpu_us_per_op"`
	DBCPUMicros      float64 `json:"db_cpu_us_per_op"`
	MachineBusy      float64 `json:"machine_busy"`
}

func (r *EffectResult) summarise() {
	r.TransfersFloorRatio = r.Transfers.RPS / r.Floor.RPS
	r.TwoPhaseFloorRatio = r.TransfersTwoPhase.RPS / r.Floor.RPS
	r.TransfersPlainRatio = r.Transfers.RPS / r.Plain.RPS
	r.FloorPlainRatio = r.Floor.RPS / r.Plain.RPS
}

// Misses lists the target misses: transfers ÷ floor below Target at
// TargetClients clients, on PostgreSQL only.
func (rep *EffectsReport) Misses() []string {
	if rep.DB != "postgres" {
		return nil
	}
	var m []string
	for _, r := range rep.Results {
		if r.Clients == rep.TargetClients && r.TransfersFloorRatio < rep.Target {
			m = append(m, fmt.Sprintf("latency %s, %d clients: transfers ÷ floor %.2f < %.2f",
				ms(r.LatencyMs), r.Clients, r.TransfersFloorRatio, rep.Target))
		}
	}
	return m
}

// WriteTable writes the report as text tables.
func (rep *EffectsReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "idem bench --effects: %s, %s, %d CPUs", rep.DB, rep.Go, rep.CPUs)
	if rep.Load != nil {
		fmt.Fprintf(w, ", load average %.2f at the start and %.2f at the end", rep.Load.Start, rep.Load.End)
	}
	fmt.Fprintf(w, "\nmedians of %d rounds of %s per cell (warm-up %s); POST /v1/transfers against the demo provider\n",
		rep.Rounds, seconds(rep.DurationSeconds), seconds(rep.WarmupSeconds))
	fmt.Fprint(w, "\nrequests per second, client latency (p50/p99 ms); commits and WAL bytes per transfer (PostgreSQL);\n"+
		"CPU µs per transfer of this process (servers, provider, load generator) and of PostgreSQL; machine busy\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency\tclients\tvariant\treq/s\tp50\tp99\tcommits\tWAL B\tCPU proc\tCPU db\tbusy\t")
	opt := func(p *float64, f string) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf(f, *p)
	}
	for _, r := range rep.Results {
		for _, v := range []struct {
			name string
			f    EffectFigures
		}{{"plain", r.Plain}, {"floor", r.Floor}, {"transfers", r.Transfers}, {"transfers 2p", r.TransfersTwoPhase}} {
			db := "-"
			if rep.DBCPUMeasured {
				db = fmt.Sprintf("%.0f", v.f.DBCPUMicros)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.2f\t%.2f\t%s\t%s\t%.0f\t%s\t%.0f%%\t\n", ms(r.LatencyMs), r.Clients, v.name,
				v.f.RPS, v.f.P50Ms, v.f.P99Ms, opt(v.f.CommitsPerOp, "%.2f"), opt(v.f.WALBytesPerOp, "%.0f"),
				v.f.ProcessCPUMicros, db, 100*v.f.MachineBusy)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(w, "\nratios of the medians\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency\tclients\ttransfers ÷ floor\ttransfers 2p ÷ floor\ttransfers ÷ plain\tfloor ÷ plain\t")
	for _, r := range rep.Results {
		ratio := fmt.Sprintf("%.2f", r.TransfersFloorRatio)
		if rep.DB == "postgres" && r.Clients == rep.TargetClients {
			ratio += " " + mark(r.TransfersFloorRatio >= rep.Target)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%.2f\t%.2f\t\n", ms(r.LatencyMs), r.Clients, ratio, r.TwoPhaseFloorRatio, r.TransfersPlainRatio, r.FloorPlainRatio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if rep.DB != "postgres" {
		_, err = fmt.Fprintf(w, "\nThe target (transfers ÷ floor ≥ %.2f at %d clients) is set for PostgreSQL; it does not apply to %s.\n",
			rep.Target, rep.TargetClients, rep.DB)
		return err
	}
	m := rep.Misses()
	if len(m) == 0 {
		_, err = fmt.Fprintf(w, "\nTarget met: transfers ÷ floor ≥ %.2f at %d clients at every latency.\n", rep.Target, rep.TargetClients)
		return err
	}
	fmt.Fprintln(w, "\nTarget missed:")
	for _, s := range m {
		if _, err = fmt.Fprintf(w, "  %s\n", s); err != nil {
			return err
		}
	}
	return nil
}

// ms formats milliseconds as a duration ("1ms", "20ms").
func ms(v float64) string { return time.Duration(v * float64(time.Millisecond)).String() }
