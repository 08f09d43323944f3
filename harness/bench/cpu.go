package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// taskTimes is how long a set of threads ran on a CPU and how long they
// waited, runnable, in a run queue for one: Linux's per-thread schedstat
// (/proc/PID/task/TID/schedstat, nanoseconds, exact rather than in clock
// ticks).
type taskTimes struct{ cpu, wait time.Duration }

func (t taskTimes) sub(u taskTimes) taskTimes  { return taskTimes{t.cpu - u.cpu, t.wait - u.wait} }
func (t taskTimes) plus(u taskTimes) taskTimes { return taskTimes{t.cpu + u.cpu, t.wait + u.wait} }

// processTimes returns the summed taskTimes of every thread of pid.
func processTimes(pid int) (taskTimes, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return taskTimes{}, fmt.Errorf("bench: no schedstat for process %d (Linux with schedstats needed)", pid)
	}
	var sum taskTimes
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return taskTimes{}, fmt.Errorf("bench: %s: unexpected %q", p, b)
		}
		cpu, err1 := strconv.ParseInt(f[0], 10, 64)
		wait, err2 := strconv.ParseInt(f[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return taskTimes{}, fmt.Errorf("bench: %s: %w", p, err)
		}
		sum.cpu += time.Duration(cpu)
		sum.wait += time.Duration(wait)
	}
	return sum, nil
}

// parentPID returns the parent of pid, from /proc/PID/stat.
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: unexpected %q", pid, b)
	}
	return strconv.Atoi(f[1])
}

// childPIDs returns the processes whose parent is pid.
func childPIDs(pid int) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		c, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if p, err := parentPID(c); err == nil && p == pid {
			out = append(out, c)
		}
	}
	return out
}

// postmasterPID finds the PostgreSQL server behind cfg: the parent of a
// backend of its own (backend_pid in cpu.sql), which must be a process on
// this machine that this one can read. ctx governs the connection.
func postmasterPID(ctx context.Context, cfg *pgx.ConnConfig) (int, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var backend int
	if err := conn.QueryRow(ctx, queries.Get("backend_pid")).Scan(&backend); err != nil {
		return 0, err
	}
	pm, err := parentPID(backend)
	if err != nil {
		return 0, fmt.Errorf("bench: PostgreSQL's backend %d is not a process on this machine this one can read: %w", backend, err)
	}
	return pm, nil
}

// cpuMeter measures the CPU and run-queue time of the bench process (its
// servers and its load generator, one process) and, where PostgreSQL runs
// on this machine, of the postmaster and every process it started
// (backends, WAL writer, checkpointer, …). Not safe for concurrent use.
type cpuMeter struct {
	self       int
	postmaster int // 0: PostgreSQL not measured
}

// openCPUMeter returns a cpuMeter of this process and, when conn is a
// PostgreSQL server on this machine whose processes this one can read,
// of that server; otherwise it says on progress why the server is not
// measured, and measures this process only. It reads once, so that a
// machine without per-thread schedstat fails here rather than mid-run.
// ctx governs the connection that finds the server.
func openCPUMeter(ctx context.Context, conn *pgx.ConnConfig, progress io.Writer) (*cpuMeter, error) {
	m := &cpuMeter{self: os.Getpid()}
	if conn != nil {
		if pm, err := postmasterPID(ctx, conn); err == nil {
			m.postmaster = pm
		} else {
			fmt.Fprintf(progress, "bench: PostgreSQL's CPU not measured: %v\n", err)
		}
	}
	if _, err := m.read(); err != nil {
		return nil, err
	}
	return m, nil
}

// cpuSnapshot is the meter's reading at one moment.
type cpuSnapshot struct {
	self    taskTimes
	db      map[int]taskTimes // by PID
	machine machineTicks
}

// machineTicks is /proc/stat's first line: the clock ticks every CPU of
// the machine spent, all of them and busy (neither idle nor waiting for
// I/O), whoever's work it was.
type machineTicks struct{ total, busy int64 }

// readMachine reads machineTicks; zero where there is no /proc/stat.
func readMachine() machineTicks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTicks{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return machineTicks{}
	}
	var m machineTicks
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest time is already in user time
			break
		}
		m.total += n
		if i != 3 && i != 4 { // idle, iowait
			m.busy += n
		}
	}
	return m
}

// read takes a snapshot. PostgreSQL's processes are listed afresh on
// every read; one that ended between two reads is left out of their
// difference, one that started counts from zero.
func (m *cpuMeter) read() (cpuSnapshot, error) {
	s := cpuSnapshot{machine: readMachine()}
	var err error
	if s.self, err = processTimes(m.self); err != nil {
		return s, err
	}
	if m.postmaster == 0 {
		return s, nil
	}
	s.db = map[int]taskTimes{}
	for _, pid := range append(childPIDs(m.postmaster), m.postmaster) {
		if t, err := processTimes(pid); err == nil {
			s.db[pid] = t
		}
	}
	return s, nil
}

// cpuUse is what a stretch of time cost: CPU and run-queue wait of the
// bench process and of PostgreSQL's processes (zero where not measured),
// and the machine's ticks, all CPUs and everyone's work.
type cpuUse struct {
	self, db taskTimes
	machine  machineTicks
}

func (u cpuUse) add(v cpuUse) cpuUse {
	return cpuUse{u.self.plus(v.self), u.db.plus(v.db),
		machineTicks{u.machine.total + v.machine.total, u.machine.busy + v.machine.busy}}
}

// machineBusy is the share of the machine's CPU time that was busy.
func (u cpuUse) machineBusy() float64 {
	if u.machine.total == 0 {
		return 0
	}
	return float64(u.machine.busy) / float64(u.machine.total)
}

// since returns the use between an earlier snapshot s and now.
func (m *cpuMeter) since(s cpuSnapshot) (cpuUse, error) {
	now, err := m.read()
	if err != nil {
		return cpuUse{}, err
	}
	u := cpuUse{self: now.self.sub(s.self),
		machine: machineTicks{now.machine.total - s.machine.total, now.machine.busy - s.machine.busy}}
	for pid, t := range now.db {
		u.db = u.db.plus(t.sub(s.db[pid]))
	}
	return u, nil
}
