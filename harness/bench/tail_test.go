package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestDriveOpenCountsFromSchedule: with one slot and a handler slower
// than the schedule, every request after the first waits for the slot;
// its latency counts from its scheduled send time, so the backlog shows
// (the last of 10 requests at 100/s, due at 90 ms, is answered about
// 1,650 ms after the start: the first holds the slot 300 ms, each other
// 150 ms), and the requests that found the slot busy are counted late.
// The holds are long so that a loaded machine cannot hide a busy slot: a
// request is found late unless the scheduling loop is descheduled for a
// whole hold between two requests.
func TestDriveOpenCountsFromSchedule(t *testing.T) {
	t.Parallel()
	var seq atomic.Int64
	var lat samples
	const first, handler = 300 * time.Millisecond, 150 * time.Millisecond
	w, err := driveOpen(context.Background(), 100, 100*time.Millisecond, 1, &seq, func(ctx context.Context, n int64) error {
		// The slow handler is the workload, not synchronisation.
		if n == 1 { // seq numbers from 1
			time.Sleep(first)
		} else {
			time.Sleep(handler)
		}
		return nil
	}, &lat)
	if err != nil {
		t.Fatal(err)
	}
	if w.scheduled != 10 || w.requests != 10 || w.late != 9 || seq.Load() != 10 {
		t.Fatalf("scheduled %d, answered %d, late %d, seq %d; want 10, 10, 9, 10", w.scheduled, w.requests, w.late, seq.Load())
	}
	maxMs, n := lat.quantile(1)
	// Measured from the actual send, every latency would be ≈ 150 ms.
	if n != 10 || maxMs < 1000 {
		t.Fatalf("%d latencies, the largest %.1f ms; want 10, the last ≥ 1000 ms (due at 90 ms, answered at ≈ 1650)", n, maxMs)
	}
	var sum time.Duration
	for _, d := range lat.d {
		sum += d
	}
	if sum != w.sojourn || w.elapsed < first+9*handler {
		t.Fatalf("sojourn %v, Σ latencies %v, elapsed %v", w.sojourn, sum, w.elapsed)
	}
}

// TestDriveOpenKeepsRate: with slots to spare, requests go out on their
// schedule — 40 at 200/s take at least the 195 ms until the last is due —
// and none is late.
func TestDriveOpenKeepsRate(t *testing.T) {
	t.Parallel()
	var seq atomic.Int64
	w, err := driveOpen(context.Background(), 200, 200*time.Millisecond, 8, &seq, func(ctx context.Context, n int64) error {
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.scheduled != 40 || w.requests != 40 || w.late != 0 || w.elapsed < 195*time.Millisecond {
		t.Fatalf("scheduled %d, answered %d, late %d in %v; want 40, 40, 0 in ≥ 195ms", w.scheduled, w.requests, w.late, w.elapsed)
	}
	boom := errors.New("boom")
	_, err = driveOpen(context.Background(), 1000, time.Hour, 4, &seq, func(ctx context.Context, n int64) error {
		if n%7 == 0 {
			return boom
		}
		return nil
	}, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

// TestScheduleAt: the i-th send time is computed from i, not accumulated.
func TestScheduleAt(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	if got := scheduleAt(start, 3, 300000).Sub(start); got != 100000*time.Second {
		t.Fatalf("request 300000 at 3/s scheduled at %v, want 100000s", got)
	}
}

// TestLittlesLaw works the arithmetic on known inputs: 1,000 requests in
// 2 s with 64 s of summed latency are L = 32, λ = 500/s, W = 64 ms; 0.4
// and 0.6 CPU ms per request over 2 shared CPUs are U = 0.25 and a
// 64-client bound of 32 ms; pinned one CPU each, the busier (PostgreSQL,
// 0.6 ms on its one CPU) gives U = 0.30 and 38.4 ms.
func TestLittlesLaw(t *testing.T) {
	t.Parallel()
	use := cpuUse{self: taskTimes{cpu: 400 * time.Millisecond, wait: 100 * time.Millisecond},
		db: taskTimes{cpu: 600 * time.Millisecond, wait: 2 * time.Second}, machine: machineTicks{total: 400, busy: 300}}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	q := littlesLaw(1000, 2*time.Second, 64*time.Second, use, 2, nil, 64)
	if !near(q.L, 32) || !near(q.Lambda, 500) || !near(q.WMs, 64) || !near(q.BenchCPUMs, 0.4) || !near(q.DBCPUMs, 0.6) ||
		!near(q.BenchWaitMs, 0.1) || !near(q.DBWaitMs, 2) || !near(q.Utilisation, 0.25) || !near(q.BoundMs, 32) ||
		!near(q.MachineBusy, 0.75) {
		t.Fatalf("unpinned: %+v", q)
	}
	q = littlesLaw(1000, 2*time.Second, 64*time.Second, use, 2, &Pinning{CPUs: 2, Bench: []int{0}, DB: []int{1}}, 64)
	if !near(q.Utilisation, 0.30) || !near(q.BoundMs, 38.4) {
		t.Fatalf("pinned: %+v", q)
	}
	if q := littlesLaw(1000, 2*time.Second, 64*time.Second, use, 2, nil, 0); q.BoundMs != 0 {
		t.Fatalf("an open loop has no closed-loop bound: %+v", q)
	}
	if q := littlesLaw(0, time.Second, 0, use, 2, nil, 64); q != (Queueing{}) {
		t.Fatalf("no requests: %+v", q)
	}
}

// TestParsePin: auto splits the usable CPUs (PostgreSQL the upper half),
// lists name them, and what cannot be pinned apart is refused.
func TestParsePin(t *testing.T) {
	t.Parallel()
	upTo := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	for _, tc := range []struct {
		spec      string
		usable    []int
		bench, db []int
	}{
		{"auto", upTo(2), []int{0}, []int{1}},
		{"auto", upTo(3), []int{0, 1}, []int{2}},
		{"auto", upTo(8), []int{0, 1, 2, 3}, []int{4, 5, 6, 7}},
		{"auto", []int{4, 5}, []int{4}, []int{5}}, // started under taskset -c 4,5
		{"bench=0,db=1-2", upTo(4), []int{0}, []int{1, 2}},
		{"db=3,bench=0+2", upTo(4), []int{0, 2}, []int{3}},
	} {
		p, err := parsePin(tc.spec, tc.usable)
		if err != nil || !slices.Equal(p.Bench, tc.bench) || !slices.Equal(p.DB, tc.db) || p.CPUs != len(tc.usable) {
			t.Errorf("parsePin(%q, %v) = %+v, %v; want bench %v, db %v", tc.spec, tc.usable, p, err, tc.bench, tc.db)
		}
	}
	for _, tc := range []struct {
		spec   string
		usable []int
		want   string
	}{
		{"auto", upTo(1), "at least 2 CPUs"},
		{"bench=0,db=0", upTo(2), "CPU 0 is in both sets"},
		{"bench=0,db=2", upTo(2), "CPU 2 is not one this process may use"},
		{"bench=0,db=1", []int{4, 5}, "CPU 0 is not one this process may use"},
		{"bench=0", upTo(2), "name both"},
		{"server=0,db=1", upTo(2), `unknown part "server"`},
		{"bench=1-0,db=1", upTo(2), "not a CPU or a range"},
		{"bench=x,db=1", upTo(2), "not a CPU or a range"},
		{"bench", upTo(2), "no = in"},
	} {
		if _, err := parsePin(tc.spec, tc.usable); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parsePin(%q, %v): %v, want an error with %q", tc.spec, tc.usable, err, tc.want)
		}
	}
	if got := tasksetArgs(1234, cpuList([]int{0, 2})); !slices.Equal(got, []string{"-a", "-p", "-c", "0,2", "1234"}) {
		t.Errorf("tasksetArgs = %q", got)
	}
}

// TestPinNeedsTaskset: without taskset on PATH, pinning fails and says
// why, before touching any process.
func TestPinNeedsTaskset(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := pin(context.Background(), &Pinning{CPUs: 2, Bench: []int{0}, DB: []int{1}}, nil)
	if err == nil || !strings.Contains(err.Error(), "needs taskset") {
		t.Fatalf("err %v, want one saying taskset is needed", err)
	}
}

// allowedCPUs returns the Cpus_allowed_list of pid's main thread, "" if
// the process has ended.
func allowedCPUs(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for %d", pid)
	return ""
}

// TestPinPostgres pins this process to the first CPU and a real
// PostgreSQL's postmaster and every backend to the last, then puts them
// back. Not parallel: it moves this test binary's threads.
func TestPinPostgres(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to pin apart")
	}
	ctx := context.Background()
	db, err := newFreshDB(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.drop(ctx)
	pm, err := postmasterPID(ctx, db.conn)
	if err != nil {
		t.Skipf("PostgreSQL is not a process this test can see: %v", err)
	}
	self := os.Getpid()
	selfWas, dbWas := allowedCPUs(t, self), allowedCPUs(t, pm)
	last := runtime.NumCPU() - 1
	p := &Pinning{CPUs: runtime.NumCPU(), Bench: []int{0}, DB: []int{last}}
	unpin, err := pin(ctx, p, db.conn)
	if err != nil {
		t.Fatal(err)
	}
	if got := allowedCPUs(t, self); got != "0" {
		t.Errorf("this process on CPUs %q, want 0", got)
	}
	kids := childPIDs(pm)
	if len(kids) == 0 || p.DBProcesses < 2 {
		t.Errorf("%d PostgreSQL processes pinned, %d children of the postmaster now", p.DBProcesses, len(kids))
	}
	for _, pid := range append(kids, pm) {
		if got := allowedCPUs(t, pid); got != strconv.Itoa(last) && got != "" {
			t.Errorf("PostgreSQL process %d on CPUs %q, want %d", pid, got, last)
		}
	}
	unpin()
	if got := allowedCPUs(t, self); got != selfWas {
		t.Errorf("after unpin this process is on %q, was %q", got, selfWas)
	}
	if got := allowedCPUs(t, pm); got != dbWas {
		t.Errorf("after unpin the postmaster is on %q, was %q", got, dbWas)
	}
}

// TestRunTailPostgres: a short tail run on PostgreSQL reports the closed-
// and open-loop cells, the acceptance times of the default style, and a
// Little's-law account in which PostgreSQL's CPU is measured.
func TestRunTailPostgres(t *testing.T) {
	t.Parallel()
	cfg := Config{DSN: pgtest.DSN(t), Clients: []int{3}, Duration: 200 * time.Millisecond, Warmup: 20 * time.Millisecond,
		Rounds: 1, Rates: []Rate{{OfMax: 0.5}, {PerSecond: 50}}, Outstanding: 16}
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep, err := RunTail(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if !rep.DBCPUMeasured || rep.Pinning != nil || len(rep.Cells) != 5 {
		t.Fatalf("report %+v", rep)
	}
	want := []struct{ style, loop string }{{"plain", "closed"}, {"default", "closed"}, {"two-phase", "closed"},
		{"default", "open"}, {"default", "open"}}
	for i, c := range rep.Cells {
		q := c.Queueing
		if c.Style != want[i].style || c.Loop != want[i].loop || c.Requests <= 0 || c.RPS <= 0 || c.P99Ms < c.P50Ms ||
			c.P999Ms < c.P99Ms || q.Lambda <= 0 || math.Abs(q.L-q.Lambda*q.WMs/1000) > 1e-6*q.L || q.BenchCPUMs <= 0 || q.DBCPUMs <= 0 {
			t.Errorf("cell %d: %+v", i, c)
		}
		if (c.Style == "default") != (c.Acceptances > 0 && c.AcceptP99Ms >= c.AcceptP50Ms && c.AcceptP50Ms > 0) {
			t.Errorf("cell %d: acceptance %d, p50 %.2f, p99 %.2f", i, c.Acceptances, c.AcceptP50Ms, c.AcceptP99Ms)
		}
		// The two parts are each part of the whole: neither median can
		// exceed the whole's largest, and both are measured.
		if c.Style == "default" && (c.LookupP50Ms <= 0 || c.CommitP50Ms <= 0 || c.LookupP99Ms < c.LookupP50Ms ||
			c.CommitP99Ms < c.CommitP50Ms || c.LookupP50Ms > c.AcceptP50Ms || c.CommitP50Ms > c.AcceptP50Ms) {
			t.Errorf("cell %d: acceptance p50 %.3f, lookup %.3f/%.3f, commit %.3f/%.3f", i, c.AcceptP50Ms,
				c.LookupP50Ms, c.LookupP99Ms, c.CommitP50Ms, c.CommitP99Ms)
		}
		if (c.Loop == "closed") != (q.BoundMs > 0) || (c.Loop == "closed") != (c.Clients == 3) {
			t.Errorf("cell %d: loop %s, clients %d, bound %.3f", i, c.Loop, c.Clients, q.BoundMs)
		}
	}
	if c := rep.Cells[3]; math.Abs(c.RatePerS-0.5*rep.Cells[1].RPS) > 1e-6 || c.RateOfMax != 0.5 {
		t.Errorf("50%% of the default style's closed loop (%.1f/s) scheduled at %.1f/s", rep.Cells[1].RPS, c.RatePerS)
	}
	if c := rep.Cells[4]; c.RatePerS != 50 || c.Scheduled != 10 {
		t.Errorf("50/s for 200ms scheduled %d at %.1f/s, want 10", c.Scheduled, c.RatePerS)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"not pinned", "default, 3 clients", "plain, 3 clients", "two-phase, 3 clients", "(50%)", "default, 50/s", "Little's law"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	for _, l := range strings.Split(table.String(), "\n") {
		if utf8.RuneCountInString(l) > 100 {
			t.Errorf("table line wider than 100 columns: %q", l)
		}
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Rate{"700": {PerSecond: 700}, "70%": {OfMax: 0.7}, " 12.5/s": {PerSecond: 12.5}} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-3", "0%", "x%", "fast"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

// TestRunPinned: the main run honours Config.Pin — its report records
// where the processes ran and its table says so — and leaves PostgreSQL
// on the CPUs it had. Not parallel: it moves this test binary's threads.
func TestRunPinned(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to pin apart")
	}
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	db, err := newFreshDB(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := postmasterPID(ctx, db.conn)
	db.drop(ctx)
	if err != nil {
		t.Skipf("PostgreSQL is not a process this test can see: %v", err)
	}
	was := allowedCPUs(t, pm)
	cfg := tinyConfig(dsn)
	cfg.Clients, cfg.Rounds, cfg.Pin = []int{2}, 1, "auto"
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pinning == nil || len(rep.Pinning.Bench) == 0 || len(rep.Pinning.DB) == 0 || rep.Pinning.DBProcesses < 2 {
		t.Fatalf("pinning %+v", rep.Pinning)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "\npinned: bench process (servers + load generator) on CPU ") {
		t.Errorf("table does not say where the processes ran:\n%s", table.String())
	}
	if got := allowedCPUs(t, pm); got != was {
		t.Errorf("after the run the postmaster is on CPUs %q, was %q", got, was)
	}
	cfg.Pin = "bench=0,db=0"
	if _, err := Run(ctx, cfg); err == nil || !strings.Contains(err.Error(), "in both sets") {
		t.Errorf("overlapping pin: %v", err)
	}
}
