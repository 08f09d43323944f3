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
	// Pass says which targets the cell met.
	Pass Pass `json:"pass"`
	// RoundsRPS holds every round's throughput, in round order.
	RoundsRPS RoundsRPS `json:"rounds_rps"`
}

// Pass says which of the Targets a Result met.
type Pass struct {
	First       bool `json:"first"`
	Replay      bool `json:"replay"`
	Reservation bool `json:"reservation"`
}

// RoundsRPS are the per-round throughputs behind a Result's medians.
type RoundsRPS struct {
	Plain      []float64 `json:"plain"`
	IdemFirst  []float64 `json:"idem_first"`
	IdemReplay []float64 `json:"idem_replay"`
	DBInsert   []float64 `json:"db_insert"`
}

// summarise fills the medians, ratios and pass flags from RoundsRPS and
// the reservation figures.
func (r *Result) summarise(t Targets) {
	r.PlainRPS = median(r.RoundsRPS.Plain)
	r.IdemFirstRPS = median(r.RoundsRPS.IdemFirst)
	r.IdemReplayRPS = median(r.RoundsRPS.IdemReplay)
	r.DBInsertRPS = median(r.RoundsRPS.DBInsert)
	r.FirstRatio = r.IdemFirstRPS / r.PlainRPS
	r.ReplayRatio = r.IdemReplayRPS / r.PlainRPS
	r.Pass = Pass{
		First:       r.FirstRatio >= t.FirstRatio,
		Replay:      r.ReplayRatio >= t.ReplayRatio,
		Reservation: r.ReservationP99Ms <= t.ReservationP99Ms,
	}
}

// Met reports whether every result met every target.
func (rep *Report) Met() bool {
	for _, r := range rep.Results {
		if !r.Pass.First || !r.Pass.Replay || !r.Pass.Reservation {
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
	fmt.Fprintln(tw, "clients\tplain/s\tidem first/s\tidem replay/s\tdb insert/s\tfirst÷plain\treplay÷plain\treserve p50 ms\treserve p99 ms\treplay reserve p99 ms\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f %s\t%.2f %s\t%.2f\t%.2f %s\t%.2f\t\n",
			r.Clients, r.PlainRPS, r.IdemFirstRPS, r.IdemReplayRPS, r.DBInsertRPS,
			r.FirstRatio, mark(r.Pass.First), r.ReplayRatio, mark(r.Pass.Replay),
			r.ReservationP50Ms, r.ReservationP99Ms, mark(r.Pass.Reservation), r.ReplayReservationP99Ms)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := rep.Targets
	fmt.Fprintf(w, "\ntargets (set for PostgreSQL): first ≥ %.2f × plain, replay ≥ %.2f × plain, reservation p99 ≤ %.0f ms (5 %% of 200 ms)\n",
		t.FirstRatio, t.ReplayRatio, t.ReservationP99Ms)
	if m := rep.Misses(); len(m) > 0 {
		_, err := fmt.Fprintf(w, "missed: %s\n", strings.Join(m, "; "))
		return err
	}
	_, err := fmt.Fprintln(w, "all targets met")
	return err
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

func seconds(s float64) string { return time.Duration(s * float64(time.Second)).String() }
