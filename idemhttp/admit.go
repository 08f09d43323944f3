package idemhttp

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// DefaultAdmitRefresh is how often a ControlAdmitter reads the control row
// when its Refresh is zero: drain and epoch changes reach every instance
// within about this long.
const DefaultAdmitRefresh = time.Second

// ControlAdmitter is a Middleware.Admit that follows the registry's control
// row (SPEC E6): while the registry is draining it refuses new operations
// with 503 DRAINING, and once the registry's writer epoch is above
// WriterEpoch it refuses them with 503 WRITER_FENCED. The middleware asks
// it only before accepting a new operation, never before a replay, and the
// completion of an accepted operation is not affected by draining.
//
// It caches the row and reads it again at most once per Refresh, lazily on
// the request that finds it stale — no goroutine. While one request reads
// it, concurrent requests use the value in hand, so a slow registry delays
// only that one. A failed read refuses that request (503
// STORE_UNAVAILABLE) and is retried by the next. The registry's own writer
// fence does not wait for the refresh: Reserve and Complete refuse an old
// writer at once (registry.ErrWriterFenced).
//
// Set the fields before the first Admit and do not change them; the zero
// value of the unexported state is ready. Safe for concurrent use.
type ControlAdmitter struct {
	// Controller is the registry, usually the Middleware's Store.
	// Required.
	Controller registry.Controller
	// WriterEpoch is this writer's epoch, the Middleware's WriterEpoch.
	WriterEpoch int64
	// Refresh is the longest a read of the control row is used; 0 or
	// less means DefaultAdmitRefresh.
	Refresh time.Duration

	mu   sync.Mutex                  // held by the request that reads the row
	snap atomic.Pointer[controlSnap] // the last row read, nil before the first
}

// controlSnap is a control row and when it was read.
type controlSnap struct {
	ctl registry.Control
	at  time.Time
}

// Admit returns nil when new operations may be accepted, else an
// *idem.Error with code WRITER_FENCED or DRAINING (WRITER_FENCED wins when
// both hold: it does not go away by itself). ctx governs a read of the
// control row, if one is due.
func (a *ControlAdmitter) Admit(ctx context.Context) error {
	ctl, err := a.Control(ctx)
	if err != nil {
		return fmt.Errorf("idemhttp: reading the registry's control row: %w", err)
	}
	switch {
	case ctl.WriterEpoch > a.WriterEpoch:
		return &idem.Error{Code: idem.CodeWriterFenced, Reason: fmt.Sprintf(
			"this server writes at epoch %d and the registry is at epoch %d; retry, another server will take the request", a.WriterEpoch, ctl.WriterEpoch)}
	case ctl.Draining:
		return &idem.Error{Code: idem.CodeDraining, Reason: "the service is draining and accepts no new operations; retry later (replays still work)"}
	}
	return nil
}

// Control returns the cached control row, reading it first if the cache
// is older than Refresh (or empty); see ControlAdmitter.
func (a *ControlAdmitter) Control(ctx context.Context) (registry.Control, error) {
	snap := a.snap.Load()
	if a.fresh(snap) {
		return snap.ctl, nil
	}
	if snap != nil {
		if !a.mu.TryLock() {
			return snap.ctl, nil // another request is reading it
		}
	} else {
		a.mu.Lock() // nothing to fall back on: wait for the first read
	}
	defer a.mu.Unlock()
	if snap = a.snap.Load(); a.fresh(snap) {
		return snap.ctl, nil
	}
	ctl, err := a.Controller.Control(ctx)
	if err != nil {
		return registry.Control{}, err
	}
	a.snap.Store(&controlSnap{ctl: ctl, at: time.Now()})
	return ctl, nil
}

// fresh reports whether snap may still be used.
func (a *ControlAdmitter) fresh(snap *controlSnap) bool {
	refresh := cmp.Or(max(a.Refresh, 0), DefaultAdmitRefresh)
	return snap != nil && time.Since(snap.at) < refresh
}
