package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Pinning is where a run put its processes (Config.Pin), as the report
// records it. The bench process holds the servers and the load generator
// together — Go schedules goroutines on any of its threads, so the two
// cannot be given CPUs apart within one process — and PostgreSQL is the
// postmaster with every process it started, present and future (a new
// backend inherits the postmaster's CPUs).
type Pinning struct {
	// CPUs is how many CPUs the bench process could use before it was
	// pinned (usableCPUs), which the two sets are taken from.
	CPUs int `json:"cpus"`
	// Bench and DB are the CPUs of the bench process and of PostgreSQL.
	Bench []int `json:"bench_cpus"`
	DB    []int `json:"db_cpus"`
	// DBProcesses is how many PostgreSQL processes were pinned at the
	// start (later backends inherit it).
	DBProcesses int `json:"db_processes"`
}

// String is the pinning for people: "bench (servers + load) on CPU 0,
// PostgreSQL on CPU 1, of 2".
func (p *Pinning) String() string {
	return fmt.Sprintf("bench process (servers + load generator) on CPU %s, PostgreSQL on CPU %s, of %d",
		cpuList(p.Bench), cpuList(p.DB), p.CPUs)
}

// parsePin parses Config.Pin for a process allowed to run on the CPUs
// usable (at least one, ascending): "auto" gives PostgreSQL the upper half
// of them (rounded down, at least one) and the bench process the rest —
// on 2 CPUs, bench 0 and PostgreSQL 1; "bench=LIST,db=LIST" with LIST a
// CPU number or a range N-M (several joined by +: "0+2") names them. The
// two sets must not overlap and every CPU must be usable; fewer than 2
// usable CPUs leave nothing to separate.
func parsePin(spec string, usable []int) (*Pinning, error) {
	if len(usable) < 2 {
		return nil, fmt.Errorf("bench: --pin needs at least 2 CPUs to separate the bench process from PostgreSQL; this process may use %d (%s)",
			len(usable), cpuList(usable))
	}
	p := &Pinning{CPUs: len(usable)}
	if spec == "auto" {
		half := len(usable) / 2
		p.Bench = slices.Clone(usable[:len(usable)-half])
		p.DB = slices.Clone(usable[len(usable)-half:])
		return p, nil
	}
	for part := range strings.SplitSeq(spec, ",") {
		name, list, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("bench: --pin %q: want auto or bench=LIST,db=LIST (LIST: N, N-M, joined by +): no = in %q", spec, part)
		}
		cpus, err := parseCPUs(list, usable)
		if err != nil {
			return nil, fmt.Errorf("bench: --pin %q: %w", spec, err)
		}
		switch name {
		case "bench":
			p.Bench = cpus
		case "db":
			p.DB = cpus
		default:
			return nil, fmt.Errorf("bench: --pin %q: unknown part %q (bench or db)", spec, name)
		}
	}
	if p.Bench == nil || p.DB == nil {
		return nil, fmt.Errorf("bench: --pin %q: name both bench= and db=", spec)
	}
	for _, c := range p.Bench {
		if slices.Contains(p.DB, c) {
			return nil, fmt.Errorf("bench: --pin %q: CPU %d is in both sets", spec, c)
		}
	}
	return p, nil
}

// parseCPUs parses "0", "2-3" or "0+2-3" into CPU numbers, each of them
// usable; a range's separator is "-" as in taskset's lists.
func parseCPUs(list string, usable []int) ([]int, error) {
	var out []int
	for r := range strings.SplitSeq(list, "+") {
		cpus, err := parseRange(r)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU or a range N-M", list, r)
		}
		for _, c := range cpus {
			if !slices.Contains(usable, c) {
				return nil, fmt.Errorf("CPU list %q: CPU %d is not one this process may use (%s)", list, c, cpuList(usable))
			}
		}
		out = append(out, cpus...)
	}
	return out, nil
}

// parseRange parses "3" or "2-5" into the CPU numbers it names.
func parseRange(r string) ([]int, error) {
	lo, hi, isRange := strings.Cut(r, "-")
	a, err := strconv.Atoi(lo)
	if err != nil || a < 0 {
		return nil, errors.New("bad CPU")
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(hi); err != nil || b < a {
			return nil, errors.New("bad range")
		}
	}
	var out []int
	for c := a; c <= b; c++ {
		out = append(out, c)
	}
	return out, nil
}

// usableCPUs returns the CPUs this process may run on, ascending: its
// Cpus_allowed_list in /proc/self/status (taskset's list form, "0-3,6"),
// or, where that cannot be read, 0 to runtime.NumCPU()-1.
func usableCPUs() []int {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			v, ok := strings.CutPrefix(l, "Cpus_allowed_list:")
			if !ok {
				continue
			}
			var out []int
			for r := range strings.SplitSeq(strings.TrimSpace(v), ",") {
				cpus, err := parseRange(r)
				if err != nil {
					out = nil
					break
				}
				out = append(out, cpus...)
			}
			if len(out) > 0 {
				return out
			}
		}
	}
	out := make([]int, runtime.NumCPU())
	for i := range out {
		out[i] = i
	}
	return out
}

// cpuList formats CPU numbers for taskset -c: "0,2,3".
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// tasksetArgs are taskset's arguments that pin every thread of pid to
// cpus.
func tasksetArgs(pid int, cpus string) []string {
	return []string{"-a", "-p", "-c", cpus, strconv.Itoa(pid)}
}

// affinity returns pid's CPU list as taskset prints it ("0,1", "0-3").
func affinity(ctx context.Context, taskset string, pid int) (string, error) {
	out, err := exec.CommandContext(ctx, taskset, "-p", "-c", strconv.Itoa(pid)).Output()
	if err != nil {
		return "", fmt.Errorf("bench: taskset -p -c %d: %w", pid, err)
	}
	_, list, ok := strings.Cut(strings.TrimSpace(string(out)), ": ")
	if !ok {
		return "", fmt.Errorf("bench: taskset -p -c %d printed %q", pid, out)
	}
	return list, nil
}

// pin applies p: the bench process to p.Bench, PostgreSQL behind cfg (its
// postmaster and every child) to p.DB, with taskset, which must be on
// PATH. PostgreSQL must run on this machine under a user this process may
// change (the same, or this one is root). unpin puts every process back
// on the CPUs it had: PostgreSQL's, including the backends started since,
// on the postmaster's earlier list, the bench process on its own. ctx
// governs the commands.
func pin(ctx context.Context, p *Pinning, cfg *pgx.ConnConfig) (unpin func(), err error) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, errors.New("bench: --pin needs taskset (util-linux) on PATH, and there is none")
	}
	if cfg == nil {
		return nil, errors.New("bench: --pin works on PostgreSQL only: the bench pins the PostgreSQL server's processes")
	}
	pm, err := postmasterPID(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: --pin: finding PostgreSQL's postmaster: %w", err)
	}
	self := os.Getpid()
	selfWas, err := affinity(ctx, taskset, self)
	if err != nil {
		return nil, err
	}
	dbWas, err := affinity(ctx, taskset, pm)
	if err != nil {
		return nil, err
	}
	run := func(ctx context.Context, pid int, cpus string) error {
		out, err := exec.CommandContext(ctx, taskset, tasksetArgs(pid, cpus)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("bench: taskset %s: %w: %s", strings.Join(tasksetArgs(pid, cpus), " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	unpin = func() {
		ctx := context.WithoutCancel(ctx)
		for _, pid := range append(childPIDs(pm), pm) {
			run(ctx, pid, dbWas) // best effort: a backend may have ended
		}
		run(ctx, self, selfWas)
	}
	if err := run(ctx, self, cpuList(p.Bench)); err != nil {
		return nil, err
	}
	db := cpuList(p.DB)
	p.DBProcesses = 0
	for _, pid := range append(childPIDs(pm), pm) {
		if err := run(ctx, pid, db); err != nil {
			if _, gone := os.Stat(fmt.Sprintf("/proc/%d", pid)); gone != nil {
				continue // a backend that ended meanwhile
			}
			unpin()
			return nil, err
		}
		p.DBProcesses++
	}
	return unpin, nil
}

// pinFor pins the run's processes as cfg.Pin says, reporting it on
// cfg.Progress; with no Pin it returns nil and an unpin that does
// nothing. ctx governs the commands.
func (cfg Config) pinFor(ctx context.Context, db *freshDB) (*Pinning, func(), error) {
	if cfg.Pin == "" {
		return nil, func() {}, nil
	}
	p, err := parsePin(cfg.Pin, usableCPUs())
	if err != nil {
		return nil, nil, err
	}
	unpin, err := pin(ctx, p, db.conn)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(cfg.Progress, "bench: pinned: %s\n", p)
	return p, unpin, nil
}
