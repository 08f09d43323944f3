package operation

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// A flightSet holds the executions running in one Core
// (NewCore makes one per Core), by scope. A request whose
// key is being executed there waits for that execution and then looks the
// record up — in the one-transaction style instead of running the handler
// too only to have its record insert lose and its writes roll back, in
// the two-phase style instead of answering 409 IN_PROGRESS and having the
// client poll. This saves work; it is not what makes the operation run
// once — the record's unique scope in the database is, across Cores
// and processes as well. Safe for concurrent use.
type flightSet struct {
	mu      sync.Mutex
	running map[idem.ScopeHash]chan struct{}
}

func newFlightSet() *flightSet {
	return &flightSet{running: map[idem.ScopeHash]chan struct{}{}}
}

// lead registers an execution of scope. If none is running it returns
// leader true and the caller must call land(scope, done) when it has
// finished; otherwise it returns the running execution's done channel,
// closed when that one lands.
func (f *flightSet) lead(scope idem.ScopeHash) (done chan struct{}, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.running[scope]; ok {
		return d, false
	}
	d := make(chan struct{})
	f.running[scope] = d
	return d, true
}

// land ends the execution lead registered and wakes its waiters.
func (f *flightSet) land(scope idem.ScopeHash, done chan struct{}) {
	f.mu.Lock()
	delete(f.running, scope)
	f.mu.Unlock()
	close(done)
}

// executing returns the done channel of the execution of scope registered
// in f, if there is one.
func (f *flightSet) executing(scope idem.ScopeHash) (<-chan struct{}, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.running[scope]
	return d, ok
}

// awaitFlight waits for done, at most the wait cap; false when the cap
// passed or ctx ended first.
func (c *Core) awaitFlight(ctx context.Context, done <-chan struct{}) bool {
	t := time.NewTimer(c.waitCap())
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
