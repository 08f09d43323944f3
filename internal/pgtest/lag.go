package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// PauseReplication stops the primary's WAL sender (SIGSTOP), as a network
// between the two hosts that stalls: from then on nothing the primary
// writes reaches the standby. A synchronous primary's commits wait — no
// client hears of them — while an asynchronous primary goes on
// acknowledging commits the standby will never have if the primary dies
// now. (Stopping the standby's receiver instead would not do: the
// kernel still takes the WAL into its socket buffer, and the receiver
// reads it when it continues.) resume continues the sender (SIGCONT); it
// is safe to call more than once, also after KillPrimary, and a Cleanup
// of p calls it too.
func (p *Pair) PauseReplication() (resume func(), err error) {
	pid, err := p.primary.childNamed("walsender")
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("pgtest: stopping the primary's WAL sender %d: %w", pid, err)
	}
	var once bool
	resume = func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !once {
			once = true
			_ = syscall.Kill(pid, syscall.SIGCONT) // gone already: nothing to continue
		}
	}
	p.mu.Lock()
	p.resumes = append(p.resumes, resume)
	p.mu.Unlock()
	return resume, nil
}

// childNamed returns the process ID of the child of c's postmaster whose
// command line contains name ("walsender", "walreceiver", …).
func (c *cluster) childNamed(name string) (int, error) {
	pm, err := c.postmasterPID()
	if err != nil {
		return 0, err
	}
	for _, pid := range children(pm) {
		cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && bytes.Contains(cmd, []byte(name)) {
			return pid, nil
		}
	}
	return 0, errors.New("pgtest: no " + name + " process under " + c.data)
}

// postmasterPID returns the process ID of c's postmaster: the first line
// of its postmaster.pid.
func (c *cluster) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgtest: reading postmaster.pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pgtest: %s/postmaster.pid starts with %q, not a process ID", c.data, first)
	}
	return pid, nil
}
