package bench

import (
	"fmt"
	"io"
	"strings"
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
	// DB is the database kind: "postgres" or "sqlite".
	DB string `json:"db"`
	// Go and CPUs describe the machine the run was on.
	Go   string `json:"go"`
	CPUs int    `json:"cpus"`
	// Load is the load average around the run; nil where unknown.
	Load *Load `json:"load_average,omitempty"`
	// Rounds, DurationSeconds, WarmupSeconds and ReplayKeys are the
	// run's settings (Config, defaults applied).
	Rounds          int     `json:"rounds"`
	DurationSeconds float64 `json:"duration_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	ReplayKeys      int     `json:"replay_keys"`
	Targets         Targets `json:"targets"`
	// Results holds one entry per client count, in Config.Clients order.
	Results []Result `json:"results"`
}

// Result is one client count's figures. Throughputs are requests (or
// transactions, for DBInsertRPS) per second, the median over the rounds;
// ratios are idem ÷ plain of those medians.
type Result struct {
	Clients       int     `json:"clients"`
	PlainRPS      float64 `json:"plain_rps"`
	IdemFirstRPS  float64 `json:"idem_first_rps"`
	IdemReplayRPS float64 `json:"idem_replay_rps"`
	DBInsertRPS   float64 `json:"db_insert_rps"`
	FirstRatio    float64 `json:"first_ratio"`
	ReplayRatio   float64 `json:"replay_ratio"`
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
	RoundsRPS RoundsRPS `json:"rounds_rps"`
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

// RoundsRPS are the per-round throughputs behind a Result's medians.
type RoundsRPS struct {
	Plain          []float64 `json:"plain"`
	IdemFirst      []float64 `json:"idem_first"`
	IdemFirstOneTx []float64 `json:"idem_first_one_tx"`
	IdemReplay     []float64 `json:"idem_replay"`
	DBInsert       []float64 `json:"db_insert"`
}

// summarise fills the medians, ratios and pass flags from RoundsRPS and
// the reservation figures.
func (r *Result) summarise(t Targets) {
	r.PlainRPS = median(r.RoundsRPS.Plain)
	r.IdemFirstRPS = median(r.RoundsRPS.IdemFirst)
	r.IdemReplayRPS = median(r.RoundsRPS.IdemReplay)
	r.DBInsertRPS = median(r.RoundsRPS.DBInsert)
	r.IdemFirstOneTxRPS = median(r.RoundsRPS.IdemFirstOneTx)
	r.FirstRatio = r.IdemFirstRPS / r.PlainRPS
	r.FirstOneTxRatio = r.IdemFirstOneTxRPS / r.PlainRPS
	r.ReplayRatio = r.IdemReplayRPS / r.PlainRPS
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

// WriteTable writes the report as a table for people.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "idem bench: %s, %s, %d CPUs; median of %d rounds of %s per cell (warm-up %s), %d replay keys\n",
		rep.DB, rep.Go, rep.CPUs, rep.Rounds, seconds(rep.DurationSeconds), seconds(rep.WarmupSeconds), rep.ReplayKeys)
	if rep.Load != nil {
		fmt.Fprintf(w, "load average %.2f at the start, %.2f at the end\n", rep.Load.Start, rep.Load.End)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tplain/s\tidem first/s\tone-tx first/s\tidem replay/s\tdb insert/s\tfirst÷plain\tone-tx÷plain\treplay÷plain\t"+
		"reserve p50 ms\treserve p99 ms\tone-tx accept p50 ms\tone-tx accept p99 ms\treplay reserve p99 ms\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f %s\t%.2f %s\t%.2f %s\t%.2f\t%.2f %s\t%.2f\t%.2f %s\t%.2f\t\n",
			r.Clients, r.PlainRPS, r.IdemFirstRPS, r.IdemFirstOneTxRPS, r.IdemReplayRPS, r.DBInsertRPS,
			r.FirstRatio, mark(r.Pass.First), r.FirstOneTxRatio, mark(r.Pass.FirstOneTx), r.ReplayRatio, mark(r.Pass.Replay),
			r.ReservationP50Ms, r.ReservationP99Ms, mark(r.Pass.Reservation),
			r.OneTxAcceptanceP50Ms, r.OneTxAcceptanceP99Ms, mark(r.Pass.AcceptanceOneTx), r.ReplayReservationP99Ms)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := rep.Targets
	fmt.Fprintf(w, "\ntargets (set for PostgreSQL): first ≥ %.2f × plain, replay ≥ %.2f × plain, reservation p99 ≤ %.0f ms (5 %% of 200 ms); "+
		"met when replay and one style's first and reservation are\n",
		t.FirstRatio, t.ReplayRatio, t.ReservationP99Ms)
	m := rep.Misses()
	var err error
	switch {
	case len(m) == 0:
		_, err = fmt.Fprintln(w, "all targets met")
	case rep.Met():
		_, err = fmt.Fprintf(w, "targets met (in one style at every client count); missed: %s\n", strings.Join(m, "; "))
	default:
		_, err = fmt.Fprintf(w, "missed: %s\n", strings.Join(m, "; "))
	}
	return err
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

func seconds(s float64) string { return time.Duration(s * float64(time.Second)).String() }
