// Package failpoint injects crashes, pauses and errors at named seams, for
// the fault suite. It is driven by the environment variable
//
//	IDEM_FAILPOINTS=name=action[,name=action]
//
// with actions "kill" (SIGKILL the process at once), "pause" (print
// "failpoint NAME paused" to stderr and block forever), "error" (Hit
// returns an error) and "wait" (print "failpoint NAME waiting" to stderr
// and block until the process receives SIGUSR1, then carry on: a test
// can act on the process's state at the seam — take a lock, cut a
// connection — before letting it go on; one SIGUSR1 releases every Hit
// waiting at that moment). The seams are named by the code that calls Hit:
// after-reserve, before-commit, after-commit, after-downstream, and
// "idem shard move"'s shard-STEP after each step of a tenant move
// (shard-drain, shard-fence, shard-copy, shard-data, shard-switch, …).
//
// The variable is read once, at first use. Unset, Hit costs one atomic
// load and a nil map lookup. Safe for concurrent use.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
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
	for _, a := range actions {
		if a == "wait" {
			startResumer()
			break
		}
	}
}

// resume is closed and replaced on every SIGUSR1 (action "wait").
var (
	resumeMu sync.Mutex
	resume   chan struct{}
)

// startResumer turns SIGUSR1 into a broadcast to the waiting Hits. It
// runs only when some failpoint is configured to wait, so the signal
// keeps its default meaning otherwise.
func startResumer() {
	resume = make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	go func() {
		for range sigs {
			resumeMu.Lock()
			close(resume)
			resume = make(chan struct{})
			resumeMu.Unlock()
		}
	}()
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
// blocks forever, blocks until SIGUSR1, or returns ErrInjected (wrapped
// with the name).
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
	case "wait":
		resumeMu.Lock()
		ch := resume
		resumeMu.Unlock()
		fmt.Fprintf(os.Stderr, "failpoint %s waiting\n", name)
		<-ch
	}
	return nil
}
