package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Targets are the goals set for PostgreSQL: a first execution at least
// FirstRatio of the plain handler's throughput, a replay at least
// ReplayRatio of it, and the p99 reservation within ReservationP99Ms (5 %
// of a 200 ms endpoint budget).
type Targets struct {
	FirstRatio       float64 `json:"first_ratio"`
	ReplayRatio      float64 `json:"replay_ratio"`
	ReservationP99Ms float64 `json:"reservation_p99_ms"`
}

// DefaultTargets are the targets every Report is checked against.
var DefaultTargets = Targets{FirstRatio: 0.80, ReplayRatio: 1.00, ReservationP99Ms: 0.05 * 200}

// Report is the outcome of a run.
type Report struct {
	// DB is the database kind: "postgres", "mysql" or "sqlite".
	DB string `json:"db"`
	// Go and CPUs describe the machine the run was on.
	Go   string `json:"go"`
	CPUs int    `json:"cpus"`
	// Load is the load average around the run; nil where unknown.
	Load *Load `json:"load_average,omitempty"`
	// Pinning is where the run's processes ran (Config.Pin); nil when
	// they were not pinned.
	Pinning *Pinning `json:"pinning,omitempty"`
	// Rounds, DurationSeconds, WarmupSeconds and ReplayKeys are the
	// run's settings (Config, defaults applied).
	Rounds          int     `json:"rounds"`
	DurationSeconds float64 `json:"duration_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	ReplayKeys      int     `json:"replay_keys"`
	Targets         Targets `json:"targets"`
	// Results holds one entry per client count, in Config.Clients order.
	Results []Result `json:"results"`

	// floorCreated is how many floor requests were answered 201, warm-ups
	// included: one idem_bench_floor row each (checked by the tests).
	floorCreated int64
}

// Result is one client count's figures. Throughputs are requests (or
// transactions, for DBInsertRPS) per second, the median over the rounds;
// ratios are idem ÷ plain (or ÷ floor, where the name says so) of those
// medians.
type Result struct {
	Clients  int     `json:"clients"`
	PlainRPS float64 `json:"plain_rps"`
	// FloorRPS is the floor variant: the plain handler with the smallest
	// idempotency row (a 32-byte scope primary key) in its transaction;
	// FloorRatio is floor ÷ plain.
	FloorRPS      float64 `json:"floor_rps"`
	FloorRatio    float64 `json:"floor_ratio"`
	IdemFirstRPS  float64 `json:"idem_first_rps"`
	IdemReplayRPS float64 `json:"idem_replay_rps"`
	// IdemReplayCachedRPS is the same replays served with the replay
	// cache on; ReplayCachedRatio is it ÷ IdemReplayRPS (no target).
	IdemReplayCachedRPS float64 `json:"idem_replay_cached_rps"`
	ReplayCachedRatio   float64 `json:"replay_cached_ratio"`
	DBInsertRPS         float64 `json:"db_insert_rps"`
	FirstRatio          float64 `json:"first_ratio"`
	ReplayRatio         float64 `json:"replay_ratio"`
	// ReservationP99Ms is the p99 (nearest rank) of Store.Reserve over
	// every timed first execution of all rounds, Reservations of them.
	ReservationP99Ms float64 `json:"reservation_p99_ms"`
	Reservations     int     `json:"reservations"`
	// ReservationP50Ms is the median of the same samples.
	ReservationP50Ms float64 `json:"reservation_p50_ms"`
	// ReplayReservationP99Ms is the same over the timed replays, where
	// Reserve finds the finished operation.
	ReplayReservationP99Ms float64 `json:"replay_reservation_p99_ms"`
	// IdemFirstOneTxRPS is the first execution in the one-transaction
	// style (idemhttp.Operation.OneTransaction), FirstOneTxRatio its
	// ratio to plain.
	IdemFirstOneTxRPS float64 `json:"idem_first_one_tx_rps"`
	FirstOneTxRatio   float64 `json:"first_one_tx_ratio"`
	// FirstFloorRatio and FirstOneTxFloorRatio are a first execution ÷
	// floor, two-phase and one-transaction: the share of the floor's
	// throughput each style keeps. No target applies to them.
	FirstFloorRatio      float64 `json:"first_floor_ratio"`
	FirstOneTxFloorRatio float64 `json:"first_one_tx_floor_ratio"`
	// OneTxAcceptanceP99Ms is the p99 (nearest rank) over every timed
	// one-transaction first execution of the time its request spent in
	// the registry outside the handler: the lookup, then ExecuteOnce's
	// record insert and durable COMMIT (the business writes' commit too:
	// they share it, so this is stricter than Reserve's asynchronous
	// commit; see acceptance in timing.go). OneTxAcceptances of them; P50 their median.
	OneTxAcceptanceP99Ms float64 `json:"one_tx_acceptance_p99_ms"`
	OneTxAcceptanceP50Ms float64 `json:"one_tx_acceptance_p50_ms"`
	OneTxAcceptances     int     `json:"one_tx_acceptances"`
	// Pass says which targets the cell met.
	Pass Pass `json:"pass"`
	// RoundsRPS holds every round's throughput, in round order.
	RoundsRPS PerRound `json:"rounds_rps"`
	// WALBytesPerOp is, per variant, the median over the rounds of the
	// bytes of PostgreSQL write-ahead log inserted during the timed cell
	// (pg_current_wal_insert_lsn before and after, cluster-wide) ÷ the
	// requests (db insert: transactions) it completed; nil, and absent
	// from the JSON, on SQLite, where it is not measured.
	WALBytesPerOp *PerVariant `json:"wal_bytes_per_op,omitempty"`
	// RoundsWALBytesPerOp holds every round's figure behind
	// WALBytesPerOp; nil when it is.
	RoundsWALBytesPerOp *PerRound `json:"rounds_wal_bytes_per_op,omitempty"`
}

// Pass says which of the Targets a Result met: First and Reservation
// for the two-phase style, FirstOneTx and AcceptanceOneTx for the
// one-transaction style (the reservation target applied to its
// acceptance time), Replay for both.
type Pass struct {
	First           bool `json:"first"`
	Replay          bool `json:"replay"`
	Reservation     bool `json:"reservation"`
	FirstOneTx      bool `json:"first_one_tx"`
	AcceptanceOneTx bool `json:"acceptance_one_tx"`
}

// styleMet reports whether one style met its throughput and acceptance
// targets.
func (p Pass) styleMet() bool { return p.First && p.Reservation || p.FirstOneTx && p.AcceptanceOneTx }

// PerRound holds one figure per round for each variant, in round order:
// the per-round values behind a Result's medians.
type PerRound struct {
	Plain          []float64 `json:"plain"`
	Floor          []float64 `json:"floor"`
	IdemFirst      []float64 `json:"idem_first"`
	IdemFirstOneTx []float64 `json:"idem_first_one_tx"`
	IdemReplay     []float64 `json:"idem_replay"`
	// IdemReplayCached is the replay with the replay cache on.
	IdemReplayCached []float64 `json:"idem_replay_cached"`
	DBInsert         []float64 `json:"db_insert"`
}

// add appends x to variant v's figures.
func (p *PerRound) add(v string, x float64) {
	dst := map[string]*[]float64{variantPlain: &p.Plain, variantFloor: &p.Floor, variantFirst: &p.IdemFirst,
		variantFirstOneTx: &p.IdemFirstOneTx, variantReplay: &p.IdemReplay, variantReplayCached: &p.IdemReplayCached, variantDBInsert: &p.DBInsert}[v]
	*dst = append(*dst, x)
}

// medians returns each variant's median.
func (p *PerRound) medians() *PerVariant {
	return &PerVariant{Plain: median(p.Plain), Floor: median(p.Floor), IdemFirst: median(p.IdemFirst),
		IdemFirstOneTx: median(p.IdemFirstOneTx), IdemReplay: median(p.IdemReplay), IdemReplayCached: median(p.IdemReplayCached), DBInsert: median(p.DBInsert)}
}

// PerVariant holds one figure for each variant.
type PerVariant struct {
	Plain          float64 `json:"plain"`
	Floor          float64 `json:"floor"`
	IdemFirst      float64 `json:"idem_first"`
	IdemFirstOneTx float64 `json:"idem_first_one_tx"`
	IdemReplay     float64 `json:"idem_replay"`
	// IdemReplayCached is the replay with the replay cache on.
	IdemReplayCached float64 `json:"idem_replay_cached"`
	DBInsert         float64 `json:"db_insert"`
}

// summarise fills the medians, ratios and pass flags from RoundsRPS and
// the reservation figures, and WALBytesPerOp from RoundsWALBytesPerOp.
func (r *Result) summarise(t Targets) {
	rps := r.RoundsRPS.medians()
	r.PlainRPS, r.FloorRPS, r.IdemFirstRPS = rps.Plain, rps.Floor, rps.IdemFirst
	r.IdemFirstOneTxRPS, r.IdemReplayRPS, r.DBInsertRPS = rps.IdemFirstOneTx, rps.IdemReplay, rps.DBInsert
	r.FirstRatio = r.IdemFirstRPS / r.PlainRPS
	r.FirstOneTxRatio = r.IdemFirstOneTxRPS / r.PlainRPS
	r.ReplayRatio = r.IdemReplayRPS / r.PlainRPS
	r.IdemReplayCachedRPS = rps.IdemReplayCached
	r.ReplayCachedRatio = r.IdemReplayCachedRPS / r.IdemReplayRPS
	r.FloorRatio = r.FloorRPS / r.PlainRPS
	r.FirstFloorRatio = r.IdemFirstRPS / r.FloorRPS
	r.FirstOneTxFloorRatio = r.IdemFirstOneTxRPS / r.FloorRPS
	r.WALBytesPerOp = nil
	if r.RoundsWALBytesPerOp != nil {
		r.WALBytesPerOp = r.RoundsWALBytesPerOp.medians()
	}
	r.Pass = Pass{
		First:           r.FirstRatio >= t.FirstRatio,
		Replay:          r.ReplayRatio >= t.ReplayRatio,
		Reservation:     r.ReservationP99Ms <= t.ReservationP99Ms,
		FirstOneTx:      r.FirstOneTxRatio >= t.FirstRatio,
		AcceptanceOneTx: r.OneTxAcceptanceP99Ms <= t.ReservationP99Ms,
	}
}

// Met reports whether every result met the replay target and, in at
// least one of the two styles, the first-execution and reservation
// targets: a service picks one style per operation.
func (rep *Report) Met() bool {
	for _, r := range rep.Results {
		if !r.Pass.Replay || !r.Pass.styleMet() {
			return false
		}
	}
	return true
}

// Misses lists the targets missed, one phrase each ("16 clients: first
// 0.41 < 0.80").
func (rep *Report) Misses() []string {
	var m []string
	t := rep.Targets
	for _, r := range rep.Results {
		if !r.Pass.First {
			m = append(m, fmt.Sprintf("%d clients: first %.2f < %.2f", r.Clients, r.FirstRatio, t.FirstRatio))
		}
		if !r.Pass.Replay {
			m = append(m, fmt.Sprintf("%d clients: replay %.2f < %.2f", r.Clients, r.ReplayRatio, t.ReplayRatio))
		}
		if !r.Pass.Reservation {
			m = append(m, fmt.Sprintf("%d clients: reservation p99 %.2f ms > %.0f ms", r.Clients, r.ReservationP99Ms, t.ReservationP99Ms))
		}
		if !r.Pass.FirstOneTx {
			m = append(m, fmt.Sprintf("%d clients: one-transaction first %.2f < %.2f", r.Clients, r.FirstOneTxRatio, t.FirstRatio))
		}
		if !r.Pass.AcceptanceOneTx {
			m = append(m, fmt.Sprintf("%d clients: one-transaction acceptance p99 %.2f ms > %.0f ms", r.Clients, r.OneTxAcceptanceP99Ms, t.ReservationP99Ms))
		}
	}
	return m
}

// WriteTable writes the report for people, in lines of at most 100
// columns: the run's settings, then the tables — throughput, the ratios
// (to plain, to floor), the times spent at the acceptance point and, on
// PostgreSQL, the WAL bytes per operation (elsewhere one line saying it
// is not measured). On
// PostgreSQL, for which the Targets are set, every figure with a target
// is marked ok or MISS, and a paragraph says what the targets are, when
// they count as met, and which were missed; other databases get no marks
// and one line saying the targets do not apply.
func (rep *Report) WriteTable(w io.Writer) error {
	targets := rep.DB == "postgres"
	fmt.Fprintf(w, "idem bench: %s, %s, %d CPUs", rep.DB, rep.Go, rep.CPUs)
	if rep.Load != nil {
		fmt.Fprintf(w, ", load average %.2f at the start and %.2f at the end", rep.Load.Start, rep.Load.End)
	}
	if rep.Pinning != nil {
		fmt.Fprintf(w, "\npinned: %s", rep.Pinning)
	}
	fmt.Fprintf(w, "\nmedians of %d rounds of %s per cell (warm-up %s); replays repeat %d keys\n",
		rep.Rounds, seconds(rep.DurationSeconds), seconds(rep.WarmupSeconds), rep.ReplayKeys)
	// marked prints a figure with its mark where the targets apply.
	marked := func(v float64, ok bool) string {
		if !targets {
			return fmt.Sprintf("%.2f", v)
		}
		return fmt.Sprintf("%.2f %s", v, mark(ok))
	}

	fmt.Fprint(w, "\nrequests per second (db insert: transactions per second)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tplain\tfloor\ttwo-phase\tone-tx\treplay\tcached\tdb insert\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", r.Clients, r.PlainRPS, r.FloorRPS,
			r.IdemFirstRPS, r.IdemFirstOneTxRPS, r.IdemReplayRPS, r.IdemReplayCachedRPS, r.DBInsertRPS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprint(w, "\nratios of those medians: floor and each idem figure ÷ plain, a first execution ÷ floor\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tfloor ÷ plain\ttwo-phase ÷ plain\t÷ floor\tone-tx ÷ plain\t÷ floor\treplay ÷ plain\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%.2f\t%s\t%.2f\t%s\t%.2f\t%s\t\n", r.Clients, r.FloorRatio,
			marked(r.FirstRatio, r.Pass.First), r.FirstFloorRatio,
			marked(r.FirstOneTxRatio, r.Pass.FirstOneTx), r.FirstOneTxFloorRatio,
			marked(r.ReplayRatio, r.Pass.Replay))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprint(w, "\nthe replay cache (operation.ReplayCache): replays with it on ÷ replays without\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\treplay\tcached\tcached ÷ replay\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t\n", r.Clients, r.IdemReplayRPS, r.IdemReplayCachedRPS, r.ReplayCachedRatio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprint(w, "\nmilliseconds at the acceptance point: two-phase reserve, one-tx accept, replay reserve\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\treserve p50\treserve p99\taccept p50\taccept p99\treplay reserve p99\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%.2f\t%s\t%.2f\t%s\t%.2f\t\n",
			r.Clients, r.ReservationP50Ms, marked(r.ReservationP99Ms, r.Pass.Reservation),
			r.OneTxAcceptanceP50Ms, marked(r.OneTxAcceptanceP99Ms, r.Pass.AcceptanceOneTx), r.ReplayReservationP99Ms)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if err := rep.writeWAL(w); err != nil {
		return err
	}

	if !targets {
		_, err := fmt.Fprintf(w, "\nThe targets are set for PostgreSQL; they do not apply to %s.\n", rep.DB)
		return err
	}
	t := rep.Targets
	fmt.Fprintf(w, "\nTargets: a first execution at least %.2f × plain, a replay at least %.2f × plain, and a p99\n"+
		"reserve (two-phase) or accept (one-tx) of at most %.0f ms, 5 %% of a 200 ms budget. They are met\n"+
		"when, at every client count, the replay meets its target and one style meets both of its own.\n",
		t.FirstRatio, t.ReplayRatio, t.ReservationP99Ms)
	m := rep.Misses()
	var err error
	switch {
	case len(m) == 0:
		_, err = fmt.Fprintln(w, "Every target was met, in both styles.")
	case rep.Met():
		_, err = fmt.Fprintln(w, "The targets were met (in one style at every client count); missed:")
	default:
		_, err = fmt.Fprintln(w, "The targets were not met; missed:")
	}
	for _, miss := range m {
		if err != nil {
			break
		}
		_, err = fmt.Fprintf(w, "  %s\n", miss)
	}
	return err
}

// writeWAL writes the WAL table, or one line saying that the run has no
// WAL figures.
func (rep *Report) writeWAL(w io.Writer) error {
	if len(rep.Results) == 0 || rep.Results[0].WALBytesPerOp == nil {
		_, err := fmt.Fprintf(w, "\nWAL bytes per operation: measured on PostgreSQL only, not on %s.\n", rep.DB)
		return err
	}
	fmt.Fprint(w, "\nWAL bytes per operation: PostgreSQL's WAL insert position around each timed cell\n"+
		"÷ the requests it completed (db insert: transactions), median of the rounds\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tplain\tfloor\ttwo-phase\tone-tx\treplay\tcached\tdb insert\t")
	for _, r := range rep.Results {
		b := r.WALBytesPerOp
		if b == nil {
			b = &PerVariant{}
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", r.Clients, b.Plain, b.Floor,
			b.IdemFirst, b.IdemFirstOneTx, b.IdemReplay, b.IdemReplayCached, b.DBInsert)
	}
	return tw.Flush()
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

func seconds(s float64) string { return time.Duration(s * float64(time.Second)).String() }
