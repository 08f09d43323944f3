package mytest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerFile, in a server's directory, holds the process ID of the test
// binary that started it.
const ownerFile = "owner.pid"

// reapStale kills the servers under root whose owning test binary is gone
// (a test binary killed with SIGKILL never reaches Main's stop) and
// deletes their directories. A directory is reaped only when its owner
// file names a process that no longer exists; a server is killed only when
// the process its pid file names is a server of that very directory (its
// command line names it), so a reused process ID is never hit. Errors are
// ignored: reaping is hygiene, never a reason to fail a test. It returns
// the directories it removed.
func reapStale(root string) []string {
	dirs, _ := filepath.Glob(filepath.Join(root, "idem-mytest-*"))
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
		if !killServer(dir) {
			continue // keep what cannot be stopped, for a human to look at
		}
		if os.RemoveAll(dir) == nil {
			reaped = append(reaped, dir)
		}
	}
	return reaped
}

// killServer kills the server of dir, if one runs, and waits for it to
// be gone; it reports whether none runs any more.
func killServer(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, pidName))
	if err != nil {
		return true // never started, or shut down
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !serves(pid, dir) {
		return true
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(readyTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !serves(pid, dir) {
			return true
		}
	}
	return false
}

// serves reports whether process pid is alive and its command line names
// dir (a zombie's command line is empty).
func serves(pid int, dir string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(cmdline, []byte("--datadir="+filepath.Join(dir, "data")))
}
