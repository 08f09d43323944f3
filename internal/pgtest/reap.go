package pgtest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownerFile, in a cluster's directory, holds the process ID of the test
// binary that started it.
const ownerFile = "owner.pid"

// writeOwner records this process as the owner of c.
func (c *cluster) writeOwner() error {
	return os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// reapStale stops and deletes the clusters under root whose owning test
// binary is gone: a test binary killed with SIGKILL (a timeout, an
// interrupted run) never reaches Main's stop, and its server would run
// until the machine restarts. A cluster is reaped only when its owner file
// names a process that no longer exists; a directory without one (an older
// pgtest, or a cluster still being created) and any process ID that is in
// use again are left alone, so a live test never loses its cluster.
// Errors are ignored: reaping is hygiene, never a reason to fail a test.
// It returns the directories it removed.
func reapStale(root, bin string, cred *syscall.Credential) []string {
	dirs, _ := filepath.Glob(filepath.Join(root, "idem-pgtest-*"))
	var reaped []string
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		c := &cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data"), cred: cred}
		if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
			if c.run(true, "pg_ctl", "-m", "immediate", "-w", "-D", c.data, "stop") != nil {
				continue // keep what cannot be stopped, for a human to look at
			}
		}
		if os.RemoveAll(dir) == nil {
			reaped = append(reaped, dir)
		}
	}
	return reaped
}
