// Package failpoint injects crashes, pauses and errors at named seams, for
// the fault suite. It is driven by the environment variable
//
//	IDEM_FAILPOINTS=name=action[,name=action]
//
// with actions "kill" (SIGKILL the process at once), "pause" (print
// "failpoint NAME paused" to stderr and block forever) and "error" (Hit
// returns an error). The seams are named by the code that calls Hit:
// after-reserve, before-commit, after-commit, after-downstream.
//
// The variable is read once, at first use. Unset, Hit costs one atomic
// load and a nil map lookup. Safe for concurrent use.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Env is the environment variable that configures failpoints.
const Env = "IDEM_FAILPOINTS"

// Names of the seams, as the contract's R section lists them.
const (
	AfterReserve    = "after-reserve"
	BeforeCommit    = "before-commit"
	AfterCommit     = "after-commit"
	AfterDownstream = "after-downstream"
)

// ErrInjected is returned by Hit for the "error" action.
var ErrInjected = errors.New("failpoint: injected error")

var (
	once    sync.Once
	actions map[string]string
)

func load() {
	actions = parse(os.Getenv(Env))
}

// parse reads "name=action,…"; malformed entries are ignored.
func parse(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && name != "" {
			m[name] = action
		}
	}
	return m
}

// Hit runs the action configured for name, if any: it kills the process,
// blocks forever, or returns ErrInjected (wrapped with the name).
func Hit(name string) error {
	once.Do(load)
	switch actions[name] {
	case "":
		return nil
	case "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	case "pause":
		fmt.Fprintf(os.Stderr, "failpoint %s paused\n", name)
		select {}
	case "error":
		return fmt.Errorf("%w at %s", ErrInjected, name)
	}
	return nil
}
