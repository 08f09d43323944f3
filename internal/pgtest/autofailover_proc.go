package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/procgroup"
)

// KillPostmaster kills the node's postmaster alone with SIGKILL: its
// keeper stays, and what follows is the monitor's decision (with the
// HAMonitorSettings it fails over: the keeper restarts the server, the
// monitor demotes it and promotes the secondary). Unlike a host crash
// the postmaster's backends run on for a moment (docs/operations.md,
// "High availability"). It returns the killed process ID.
func (h *HACluster) KillPostmaster(name string) (int, error) {
	n, err := h.node(name)
	if err != nil {
		return 0, err
	}
	pid, err := n.c.postmasterPID()
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("pgtest: killing %s's postmaster %d: %w", name, pid, err)
	}
	return pid, nil
}

// StopNode kills the whole node at one instant, as a loss of its host:
// its keeper processes (one process group) and PostgreSQL — the
// postmaster and every child of it, which PostgreSQL puts each in a
// session of its own, so a signal to the keeper's group misses them. All
// are stopped first (SIGSTOP: the postmaster forks no more, no backend
// commits or answers once stopped), then killed (SIGKILL), as
// Pair.KillPrimary does; it returns once the keeper has exited and the
// port refuses connections, with the instant the first stop was sent
// (the failure's: the processes are listed before it). The monitor then
// sees a primary it cannot reach, waits primary_demote_timeout and
// promotes the secondary.
func (h *HACluster) StopNode(name string) (stopped time.Time, err error) {
	n, err := h.node(name)
	if err != nil {
		return time.Time{}, err
	}
	n.mu.Lock()
	k, group, exited := n.keeper, n.group, n.exited
	n.mu.Unlock()
	if k == nil {
		return time.Time{}, fmt.Errorf("pgtest: %s is not running", name)
	}
	// Reading /proc takes a while on a busy machine: the children are
	// listed before anything stops, so that the stops land within
	// microseconds of each other, and listed again once the postmaster
	// has stopped, for a backend it forked in between.
	pm, err := n.c.postmasterPID()
	if err != nil || !pidAlive(pm) {
		pm = 0
	}
	var pg []int
	if pm != 0 {
		pg = append([]int{pm}, children(pm)...)
	}
	stopped = time.Now()
	_ = group.Signal(syscall.SIGSTOP) // the keeper restarts nothing now
	for _, pid := range pg {
		_ = syscall.Kill(pid, syscall.SIGSTOP) // gone already: nothing to stop
	}
	if pm != 0 {
		for _, pid := range children(pm) {
			if !slices.Contains(pg, pid) {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				pg = append(pg, pid)
			}
		}
	}
	if err := group.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return stopped, fmt.Errorf("pgtest: killing %s: %w", name, err)
	}
	for _, pid := range pg {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-exited:
	case <-time.After(haStopWait):
		return stopped, fmt.Errorf("pgtest: %s's keeper did not exit after SIGKILL", name)
	}
	if err := poll(deathWait, func() (bool, error) {
		for _, pid := range pg {
			if pidAlive(pid) {
				return false, fmt.Errorf("pgtest: %s's PostgreSQL process %d still runs after SIGKILL", name, pid)
			}
		}
		return true, nil
	}); err != nil {
		return stopped, err
	}
	return stopped, n.c.awaitRefused(deathWait)
}

// RestartNode starts the node's keeper again (pg_autoctl run) after
// StopNode: the monitor tells it what to be — an old primary rejoins as
// a secondary of the new one (pg_rewind, or a new base backup when a
// rewind is impossible). It does not wait; use WaitState.
func (h *HACluster) RestartNode(name string) error {
	n, err := h.node(name)
	if err != nil {
		return err
	}
	return n.start(h.autoctl)
}

func (h *HACluster) node(name string) (*haNode, error) {
	n, ok := h.nodes[name]
	if !ok {
		return nil, fmt.Errorf("pgtest: no HA node %q (want %s or %s)", name, NodeA, NodeB)
	}
	return n, nil
}

// stop stops the data nodes' keepers, then the monitor's (SIGTERM: a
// keeper stops its server with pg_ctl -m fast), SIGKILLs the process
// group of one that does not exit within haStopWait, and deletes the
// directories of the nodes whose every process is gone. Safe to call
// twice.
func (h *HACluster) stop() error {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return nil
	}
	h.stopped = true
	h.mu.Unlock()
	var errs []error
	for _, n := range []*haNode{h.nodes[NodeA], h.nodes[NodeB], h.monitor} {
		if n != nil {
			errs = append(errs, n.stop())
		}
	}
	return errors.Join(errs...)
}

// start runs "pg_autoctl run" as the node's keeper, in its own process
// group (StopNode kills the group), writing to the node's log. The
// keeper gets SIGTERM if this test binary dies (Pdeathsig); its server
// is reaped by reapStale then.
func (n *haNode) start(autoctl string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.keeper != nil {
		return fmt.Errorf("pgtest: %s's keeper is running", n.name)
	}
	log, err := os.OpenFile(n.c.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cmd := exec.Command(autoctl, "run", "--pgdata", n.c.data)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = n.env, n.c.dir, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Credential: n.c.cred}
	group := procgroup.New(cmd)
	if err := group.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgtest: starting %s's keeper: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() {
		group.Wait() // kills what is left of the group before the number is free
		log.Close()
		close(exited)
	}()
	n.keeper, n.group, n.exited = cmd, group, exited
	go func() {
		<-exited
		n.mu.Lock()
		if n.keeper == cmd {
			n.keeper = nil
		}
		n.mu.Unlock()
	}()
	return nil
}

// stop ends the node's keeper (SIGTERM, then SIGKILL to its process
// group after haStopWait) and deletes the node's directory.
func (n *haNode) stop() error {
	n.mu.Lock()
	k, group, exited := n.keeper, n.group, n.exited
	n.mu.Unlock()
	if k != nil {
		_ = k.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(haStopWait):
			_ = group.Signal(syscall.SIGKILL) // reaped already: nothing left to kill
			<-exited
		}
	}
	// A server the keeper left behind (a killed keeper's, or one whose
	// stop failed) still owns the directory: stop it first.
	if _, err := os.Stat(filepath.Join(n.c.data, "postmaster.pid")); err == nil {
		if pid, err := n.c.postmasterPID(); err == nil && pidAlive(pid) {
			if err := n.c.run(true, "pg_ctl", "-m", "immediate", "-w", "-D", n.c.data, "stop"); err != nil {
				return fmt.Errorf("pgtest: %s: %w (directory %s kept)", n.name, err, n.c.dir)
			}
		}
	}
	return os.RemoveAll(n.c.dir)
}

// autoctl runs one pg_autoctl command to completion as the server user,
// appending its output to the node's log.
func (n *haNode) autoctl(autoctl string, args ...string) error {
	_, err := n.output(autoctl, args...)
	return err
}

// output runs one pg_autoctl command and returns its standard output;
// its standard error goes to the node's log (and into the error).
func (n *haNode) output(autoctl string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), haAutoctlWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, autoctl, args...)
	cmd.Env, cmd.Dir = n.env, n.c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.c.cred}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if f, ferr := os.OpenFile(n.c.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
		fmt.Fprintf(f, "--- pg_autoctl %s\n%s", strings.Join(args, " "), errOut.String())
		f.Close()
	}
	if err != nil {
		return "", fmt.Errorf("pgtest: pg_autoctl %s: %w\n%s\n%s", strings.Join(args, " "), err,
			strings.TrimSpace(out.String()+"\n"+errOut.String()), n.logTail())
	}
	return out.String(), nil
}

// logTail returns the end of the node's pg_autoctl log.
func (n *haNode) logTail() string {
	b, err := os.ReadFile(n.c.log)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", n.c.log, err)
	}
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return string(b)
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	_, state, ok := procStat("/proc/" + strconv.Itoa(pid) + "/stat")
	return ok && state != "Z"
}
