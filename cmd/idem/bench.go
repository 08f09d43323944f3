package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/harness/bench"
)

// runBench implements "idem bench --db DSN": one side-by-side run of the
// plain payments handler, the floor (the plain handler with a 32-byte
// scope row in its transaction), the same handler behind idem (first
// execution in both styles, and replay) and the database's raw insert
// rate, at each client count, with the WAL bytes per operation of each on
// PostgreSQL (package bench). It prints tables, or the report as JSON
// with --json; progress goes to stderr. The exit code is 0 when the run
// worked, whether or not the targets were met; with --check a missed
// target exits 1 too.
//
// With --effects it runs the effect benchmark instead (bench.RunEffects):
// POST /v1/transfers against the demo provider answering after each
// --latencies delay, plain vs floor vs idem's transfers (one-transaction, and two-phase beside it), at --clients
// (default 16,64), printing req/s, p50/p99, commits and WAL bytes per
// transfer and transfers ÷ floor; with --check a ratio below the target
// at 16 clients on PostgreSQL exits 1.
//
// With --tail it runs the tail benchmark instead (bench.RunTail): plain,
// the default style and the two-phase style closed-loop at --clients
// (default 64), then the default style open-loop at each of --rates,
// printing latency from the scheduled send time, the acceptance p50/p99
// and the Little's-law account; with --check an acceptance p99 above 10 ms exits 1. --pin pins
// the bench process and PostgreSQL to separate CPUs with taskset, for the
// payments and the tail runs.
func runBench(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("bench", "--db DSN [--effects [--latencies D,D,…] | --tail [--rates R,R,…] [--outstanding N]] [--pin auto|bench=L,db=L] [--clients N,N,…] [--duration D] [--warmup D] [--rounds N] [--replay-keys N] [--json] [--check] [--keep] [--quiet]", std)
	dsn := fs.db("", "database `DSN`: postgres://… (a new schema is created and dropped), mysql://… (a new database is created and dropped) or sqlite:PATH (PATH must not exist); required")
	effects := fs.Bool("effects", false, "run the effect benchmark: POST /v1/transfers against the demo provider, plain vs floor vs idem's transfers, one-transaction and two-phase")
	latencies := fs.String("latencies", "1ms,20ms", "with --effects: comma-separated provider `latencies`")
	tail := fs.Bool("tail", false, "run the tail benchmark: plain, the default style and two-phase closed-loop, then the default style open-loop at fixed rates, with Little's law")
	rates := fs.String("rates", "50%,70%,90%", "with --tail: comma-separated open-loop `rates`, per second (700) or % of the default style's closed-loop maximum (70%)")
	outstanding := fs.Int("outstanding", bench.DefaultOutstanding, "with --tail: most open-loop requests in flight; a request finding them all busy is counted late")
	pinSpec := fs.String("pin", "", "pin with taskset (PostgreSQL on this machine; not with --effects): auto (2 CPUs: bench process on CPU 0, PostgreSQL on 1) or bench=`LIST`,db=LIST")
	clients := fs.String("clients", "", "comma-separated client `counts` (default 1,16,64; with --effects 16,64; with --tail 64)")
	duration := fs.Duration("duration", bench.DefaultDuration, "how long each cell is timed, per round")
	warmup := fs.Duration("warmup", bench.DefaultWarmup, "untimed run before each timed cell (0: none)")
	rounds := fs.Int("rounds", bench.DefaultRounds, "rounds; cells are interleaved and the medians reported")
	replayKeys := fs.Int("replay-keys", bench.DefaultReplayKeys, "operations executed before timing for the replays to repeat")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	check := fs.Bool("check", false, "exit 1 when a target is missed")
	keep := fs.Bool("keep", false, "keep the run's schema or file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q", words))
	}
	if *clients == "" {
		*clients = "1,16,64"
		if *effects {
			*clients = "16,64"
		}
		if *tail {
			*clients = "64"
		}
	}
	if *effects && (*tail || *pinSpec != "") {
		return fs.usage("--effects takes neither --tail nor --pin")
	}
	counts, err := parseCounts(*clients)
	lats, lerr := parseLatencies(*latencies)
	rs, rerr := parseRates(*rates)
	if *dsn == "" || err != nil || lerr != nil || rerr != nil || *duration <= 0 || *warmup < 0 || *rounds <= 0 || *replayKeys <= 0 || *outstanding <= 0 {
		fmt.Fprintln(std.err, "idem bench: need --db, positive --clients, --duration, --rounds, --replay-keys, --rates and --outstanding, --latencies ≥ 0 and --warmup ≥ 0")
		return exitUsage
	}
	cfg := bench.Config{DSN: *dsn, Clients: counts, Duration: *duration, Warmup: *warmup,
		Rounds: *rounds, ReplayKeys: *replayKeys, Keep: *keep, Progress: std.err,
		Rates: rs, Outstanding: *outstanding, Pin: *pinSpec}
	if *warmup == 0 {
		cfg.Warmup = -1 // none
	}
	if *quiet {
		cfg.Progress = io.Discard
	}
	if *effects {
		cfg.Latencies = lats
		rep, err := bench.RunEffects(ctx, cfg)
		return benchAnswer(std, rep, err, *asJSON, *check)
	}
	if *tail {
		rep, err := bench.RunTail(ctx, cfg)
		return benchAnswer(std, rep, err, *asJSON, *check)
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(std.err, "idem bench:", err)
		return exitRefused
	}
	if err = writeReport(std.out, rep, *asJSON); err != nil {
		fmt.Fprintln(std.err, "idem bench:", err)
		return exitRefused
	}
	if *check && !rep.Met() {
		fmt.Fprintln(std.err, "idem bench: targets missed:", strings.Join(rep.Misses(), "; "))
		return exitRefused
	}
	return exitOK
}

// missReport is a report of the effect path or the tail: a table, and
// the targets it missed.
type missReport interface {
	tableWriter
	Misses() []string
}

// benchAnswer prints rep (or err) for runBench and returns its exit
// status: exitRefused on an error, or with check set when a target was
// missed.
func benchAnswer(std stdio, rep missReport, err error, asJSON, check bool) int {
	if err != nil {
		fmt.Fprintln(std.err, "idem bench:", err)
		return exitRefused
	}
	if err = writeReport(std.out, rep, asJSON); err != nil {
		fmt.Fprintln(std.err, "idem bench:", err)
		return exitRefused
	}
	if m := rep.Misses(); check && len(m) > 0 {
		fmt.Fprintln(std.err, "idem bench: targets missed:", strings.Join(m, "; "))
		return exitRefused
	}
	return exitOK
}

// parseCounts parses "1,16,64" into positive counts.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad client count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseLatencies parses "1ms,20ms" into durations ≥ 0.
func parseLatencies(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("bad latency %q", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// parseRates parses "50%,700" into open-loop rates (bench.ParseRate).
func parseRates(s string) ([]bench.Rate, error) {
	var out []bench.Rate
	for f := range strings.SplitSeq(s, ",") {
		r, err := bench.ParseRate(f)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
