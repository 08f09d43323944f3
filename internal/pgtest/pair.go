package pgtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StandbyName is the standby's application_name (its cluster_name): the
// name it streams under in the primary's pg_stat_replication and, with a
// synchronous pair, the primary's synchronous_standby_names.
const StandbyName = "idem_standby"

// Pair timeouts.
const (
	streamWait = time.Minute      // NewPair: until the standby streams
	deathWait  = 30 * time.Second // KillPrimary: until the port refuses
	orphanWait = 10 * time.Second // cleanup: until the killed primary's backends exit
	pollEvery  = 20 * time.Millisecond
)

// Pair is a PostgreSQL primary and a streaming hot standby on 127.0.0.1,
// each its own cluster in its own directory, for failover tests: the
// primary can be killed (KillPrimary) and the standby promoted (Promote).
// Its methods are safe for concurrent use.
//
// The primary runs wal_level=replica with a physical replication slot for
// the standby, fsync=on and synchronous_commit=on. A synchronous pair
// also names the standby (StandbyName) in synchronous_standby_names — on
// the primary's command line, not in its configuration file, so that
// pg_basebackup does not copy it to the standby: once promoted, the
// standby has no standby of its own, and a copied setting would make its
// every commit wait forever.
type Pair struct {
	primary, standby *cluster
	sync             bool

	mu       sync.Mutex
	killed   bool  // the primary's postmaster was SIGKILLed
	orphans  []int // its children at that moment
	promoted bool
	resumes  []func() // of PauseReplication, called by stop
}

// NewPair starts a primary, takes a base backup of it (pg_basebackup -R,
// with a replication slot), starts the standby on it and waits until the
// primary's pg_stat_replication shows the standby streaming — with
// sync_state "sync" when sync is true, "async" otherwise. A t.Cleanup
// stops both servers (and the orphaned backends of a killed primary) and
// deletes their directories.
//
// Like DSN, NewPair skips t when the PostgreSQL binaries are missing,
// unless IDEM_REQUIRE_POSTGRES=1 (RequireEnv), and fails t, with the
// server log tail, when a server cannot be started. It needs no Main.
func NewPair(t testing.TB, sync bool) *Pair {
	t.Helper()
	p, err := startPair(sync)
	return started(t, p, err)
}

// started is what NewPair and NewHACluster do with what they started:
// skip t when err says the binaries are missing (unless RequireEnv),
// fail it on any other err (skipOrFail), else register a cleanup that
// stops v.
func started[T interface{ stop() error }](t testing.TB, v T, err error) T {
	t.Helper()
	skipOrFail(t, err)
	t.Cleanup(func() {
		if err := v.stop(); err != nil {
			t.Error(err)
		}
	})
	return v
}

// startPair builds the pair; on failure nothing is left running.
func startPair(syncStandby bool) (_ *Pair, err error) {
	p := &Pair{sync: syncStandby}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	if p.primary, err = newCluster(); err != nil {
		return nil, err
	}
	if err := p.primary.initdb(); err != nil {
		return nil, err
	}
	if err := p.primary.writeConfig(); err != nil {
		return nil, err
	}
	if err := p.primary.appendConfig("wal_level = replica", "max_wal_senders = 5",
		"max_replication_slots = 5", "hot_standby = on"); err != nil {
		return nil, err
	}
	var opts []string
	if syncStandby {
		opts = append(opts, "-c synchronous_standby_names="+StandbyName)
	}
	if err := p.primary.start(opts...); err != nil {
		return nil, err
	}

	if p.standby, err = newCluster(); err != nil {
		return nil, err
	}
	// As the server user, so the copied files belong to it. --no-sync
	// skips only pg_basebackup's final fsync, as initdb's does; the
	// standby runs with fsync=on.
	if err := p.standby.run(true, "pg_basebackup", "-D", p.standby.data, "-h", "127.0.0.1",
		"-p", strconv.Itoa(p.primary.port), "-U", "postgres", "-w", "-R", "-X", "stream",
		"-C", "-S", StandbyName, "-c", "fast", "--no-sync"); err != nil {
		return nil, err
	}
	// The copied postgresql.conf holds the primary's socket directory;
	// writeConfig's later lines win.
	if err := p.standby.writeConfig(); err != nil {
		return nil, err
	}
	if err := p.standby.appendConfig("cluster_name = '" + StandbyName + "'"); err != nil {
		return nil, err
	}
	if err := p.standby.start(); err != nil {
		return nil, err
	}
	want := "streaming|async"
	if syncStandby {
		want = "streaming|sync"
	}
	q := "select state || '|' || sync_state from pg_stat_replication where application_name = '" + StandbyName + "'"
	if err := p.primary.await(q, want, streamWait); err != nil {
		return nil, fmt.Errorf("pgtest: waiting for the standby to stream: %w\n--- standby log tail (%s) ---\n%s",
			err, p.standby.log, p.standby.logTail())
	}
	return p, nil
}

// Ports returns the primary's and the standby's TCP ports on 127.0.0.1.
func (p *Pair) Ports() (primary, standby int) { return p.primary.port, p.standby.port }

// DSN creates the database db on the primary (it replicates to the
// standby) and returns its multi-host connection string, the primary
// first:
//
//	postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/db?sslmode=disable&target_session_attrs=read-write
//
// A client (libpq, pgx) tries the hosts in order and keeps the first that
// accepts writes: the primary, or the standby once promoted. db must be a
// plain identifier.
func (p *Pair) DSN(db string) (string, error) {
	if err := p.primary.client("createdb", "--", db); err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.primary.port, p.standby.port, db), nil
}

// KillPrimary kills the primary as a crash of its host would: every one
// of its processes at the same instant. It stops the postmaster
// (SIGSTOP, so that it forks no more backends), then each of its
// children, then sends SIGKILL to all of them, and returns once the
// primary's port refuses connections. Killing the postmaster alone would
// model something else — a postmaster killed by hand or by the kernel's
// OOM killer, which PostgreSQL's documentation warns against — where the
// orphaned backends run on for a moment: one still answers a query, and a
// commit whose wait for the standby the postmaster's death cut short
// becomes visible to it although the standby never received it
// (docs/operations.md, "High availability"). It fails if the primary was
// already killed.
func (p *Pair) KillPrimary() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed {
		return errors.New("pgtest: the primary was already killed")
	}
	pid, err := p.primary.postmasterPID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgtest: stopping the primary's postmaster %d: %w", pid, err)
	}
	p.orphans = children(pid)
	for _, c := range p.orphans {
		_ = syscall.Kill(c, syscall.SIGSTOP) // gone already: nothing to stop
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgtest: killing the primary's postmaster %d: %w", pid, err)
	}
	for _, c := range p.orphans {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	p.killed = true
	return p.primary.awaitRefused(deathWait)
}

// awaitRefused polls c's port until it refuses connections, or timeout
// passes.
func (c *cluster) awaitRefused(timeout time.Duration) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
	return poll(timeout, func() (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true, nil
		}
		conn.Close()
		return false, fmt.Errorf("pgtest: %s still accepts connections after SIGKILL", addr)
	})
}

// Promote promotes the standby (pg_ctl promote -w) and returns once it
// accepts writes. It fails if the standby was already promoted.
func (p *Pair) Promote() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.promoted {
		return errors.New("pgtest: the standby was already promoted")
	}
	if err := p.standby.run(true, "pg_ctl", "promote", "-w", "-t", startWaitSecs, "-D", p.standby.data); err != nil {
		return fmt.Errorf("%w\n--- standby log tail (%s) ---\n%s", err, p.standby.log, p.standby.logTail())
	}
	p.promoted = true
	return p.standby.await("select pg_is_in_recovery()", "f", streamWait)
}

// stop stops both servers, kills the killed primary's remaining backends
// and deletes the directories. A server that cannot be stopped keeps its
// directory, for inspection.
func (p *Pair) stop() error {
	p.mu.Lock()
	resumes := p.resumes
	p.mu.Unlock()
	for _, r := range resumes {
		r() // a stopped WAL receiver would hold up the standby's shutdown
	}
	var errs []error
	if c := p.primary; c != nil {
		if p.killed {
			reapOrphans(p.orphans)
			errs = append(errs, os.RemoveAll(c.dir))
		} else if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
			errs = append(errs, c.stop())
		} else {
			errs = append(errs, os.RemoveAll(c.dir))
		}
	}
	if c := p.standby; c != nil {
		if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
			errs = append(errs, c.stop())
		} else {
			errs = append(errs, os.RemoveAll(c.dir))
		}
	}
	return errors.Join(errs...)
}

// appendConfig appends lines to postgresql.conf.
func (c *cluster) appendConfig(lines ...string) error {
	f, err := os.OpenFile(filepath.Join(c.data, serverConfig), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if _, err := f.WriteString("\n" + strings.Join(lines, "\n") + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("pgtest: %w", err)
	}
	return f.Close()
}

// query runs sql in the postgres database over TCP (psql) and returns its
// trimmed, unaligned output.
func (c *cluster) query(sql string) (string, error) {
	out, err := c.output(false, "psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
		"-p", strconv.Itoa(c.port), "-U", "postgres", "-w", "-d", "postgres", "-c", sql)
	return strings.TrimSpace(out), err
}

// await polls sql until its output is want or timeout passes.
func (c *cluster) await(sql, want string, timeout time.Duration) error {
	var got string
	return poll(timeout, func() (bool, error) {
		var err error
		got, err = c.query(sql)
		if err == nil && got == want {
			return true, nil
		}
		return false, fmt.Errorf("%q gives %q (%v), want %q", sql, got, err, want)
	})
}

// poll calls cond every pollEvery until it reports done or timeout passes;
// it then returns cond's last error.
func poll(timeout time.Duration, cond func() (bool, error)) error {
	return pollWith(timeout, pollEvery, cond)
}

// pollWith is poll with its own interval.
func pollWith(timeout, every time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := cond()
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: after %v: %w", timeout, err)
		}
		time.Sleep(every) // a polling interval, not a synchronisation
	}
}

// children returns the process IDs whose parent is pid (from /proc).
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		if ppid, _, ok := procStat(f); ok && ppid == pid {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, n)
		}
	}
	return out
}

// procStat reads the parent process ID and the state of a /proc/PID/stat.
func procStat(path string) (ppid int, state string, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, "", false
	}
	// "pid (comm) state ppid …": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}

// reapOrphans waits up to orphanWait for the killed postmaster's backends
// to exit on their own, then kills the ones left.
func reapOrphans(pids []int) {
	alive := func(pid int) bool {
		_, state, ok := procStat("/proc/" + strconv.Itoa(pid) + "/stat")
		return ok && state != "Z"
	}
	_ = poll(orphanWait, func() (bool, error) {
		for _, pid := range pids {
			if alive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, pid := range pids {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
