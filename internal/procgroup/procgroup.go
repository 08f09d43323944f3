// Package procgroup runs a child as the leader of its own process group
// and signals that group only while the group's number cannot belong to
// anyone else.
//
// A process group is named by its leader's process ID, and kill(-pgid)
// reaches whatever group has that number now. Once the leader has been
// reaped and its group is empty, the number is free: the next process
// the kernel creates may get it and lead a group of its own. On a
// machine with pid_max at 32768 where thousands of processes start a
// minute (every PostgreSQL connection is a process, and PostgreSQL puts
// each backend in a session, so a group, of its own) a late kill(-pgid)
// ends somebody else's process — in a test run, another test's database
// backend, and with it every connection to that server. The standard
// library guards a child's own ID with a pidfd (os.Process.Signal), but
// nothing guards its group, which is why this package exists.
//
// The rule it keeps: the group is signalled only under a lock, and only
// while the leader is not yet reaped (a zombie leader still holds its
// number). [Group.Wait] waits for the leader to exit without reaping it,
// kills what is left of its group, marks it reaped under the lock, and
// only then reaps it.
package procgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Group is one child leading its own process group. Its methods are safe
// for concurrent use; Start and Wait are called once each.
type Group struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	reaped bool // the leader has exited and may be reaped: never signal the group again
}

// New prepares cmd to run as the leader of a new process group
// (SysProcAttr.Setpgid, keeping its other fields). When cmd was made by
// exec.CommandContext, its Cancel becomes killing the group with SIGKILL
// (the default kills only the leader).
func New(cmd *exec.Cmd) *Group {
	g := &Group{cmd: cmd}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	if cmd.Cancel != nil {
		cmd.Cancel = func() error { return g.Signal(syscall.SIGKILL) }
	}
	return g
}

// Start starts the command (exec.Cmd.Start).
func (g *Group) Start() error { return g.cmd.Start() }

// Pid is the leader's process ID, which is the group's ID; 0 before Start.
func (g *Group) Pid() int {
	if g.cmd.Process == nil {
		return 0
	}
	return g.cmd.Process.Pid
}

// Signal sends sig to every process of the group. Once the leader has
// exited and Wait has taken it, it sends nothing and returns an error
// wrapping os.ErrProcessDone: Wait has killed the rest of the group, and
// the number may lead another group by now.
func (g *Group) Signal(sig syscall.Signal) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd.Process == nil {
		return errors.New("procgroup: not started")
	}
	if g.reaped {
		return fmt.Errorf("procgroup: group %d: %w", g.cmd.Process.Pid, os.ErrProcessDone)
	}
	if err := syscall.Kill(-g.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("procgroup: signalling group %d: %w", g.cmd.Process.Pid, err)
	}
	return nil
}

// Wait waits until the leader exits, sends SIGKILL to what is left of its
// group while the leader's zombie still holds the group's number, and then
// reaps the leader with exec.Cmd.Wait, whose result it returns (it also
// waits for the copying of the child's output, as Cmd.Wait does).
func (g *Group) Wait() error {
	pid := g.cmd.Process.Pid
	var err error
	for {
		var info unix.Siginfo
		// WNOWAIT leaves the leader a zombie: its number stays taken.
		if err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	g.mu.Lock()
	if err == nil {
		syscall.Kill(-pid, syscall.SIGKILL) // ESRCH: nothing was left
	}
	// Whatever waitid said, Cmd.Wait reaps the leader next: from here on
	// the group is never signalled. (waitid fails only for a process
	// that is not this one's child, which cannot be: nothing else reaps
	// it. Then nothing is killed, rather than a group that may not be
	// done.)
	g.reaped = true
	g.mu.Unlock()
	return g.cmd.Wait()
}

// KillAbandoned sends SIGKILL to the process group pgid that a process
// which is gone (a test binary killed before it could clean up) once led,
// unless a process with ID pgid runs: then the number belongs to another
// process, which may lead a group of its own, and nothing is sent. The
// members of an abandoned group keep its number from being given out, so
// the check holds until the last of them is gone; the window left is an
// empty group whose number is given out between the check and the kill,
// which needs the machine to run through every process ID in between.
// It reports whether it sent the signal.
func KillAbandoned(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	if err := syscall.Kill(pgid, 0); !errors.Is(err, syscall.ESRCH) {
		return false // a process has this ID: not ours to kill
	}
	return syscall.Kill(-pgid, syscall.SIGKILL) == nil
}
