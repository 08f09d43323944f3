package registry

import (
	"context"
	"errors"
	"time"
)

// ErrWriterFenced: the caller's writer epoch (Claim.WriterEpoch, or
// Record.WriterEpoch for Complete) is older than the registry's, which an
// operator raised with Controller.BumpEpoch to roll a writer out or back.
// Nothing was written: an older writer can neither accept a new operation
// nor commit an outcome. Reading is never fenced: Reserve still returns the
// record of a scope that exists, so replays of finished operations keep
// working for every writer.
var ErrWriterFenced = errors.New("registry: writer epoch is older than the registry's")

// Control is the registry's control row (SPEC E6): one per registry,
// shared by every instance that uses it.
type Control struct {
	// WriterEpoch is the oldest writer epoch that may still accept and
	// commit operations. It starts at 0 and only rises, by one at each
	// BumpEpoch. A writer at epoch N is fenced once WriterEpoch > N.
	WriterEpoch int64
	// Draining asks every instance to refuse new operations (503
	// DRAINING) while replays and operations in flight go on. The
	// registry only stores the flag; the HTTP layer enforces it
	// (idemhttp.ControlAdmitter).
	Draining bool
	// UpdatedAt is when the row last changed (migration, bump or drain).
	UpdatedAt time.Time
}

// Controller reads and changes the control row. Every Store implements it.
// Methods are safe for concurrent use, across processes too.
type Controller interface {
	// Control returns the control row.
	Control(ctx context.Context) (Control, error)
	// BumpEpoch raises WriterEpoch by one in one atomic statement and
	// returns the new value: concurrent bumps each get a distinct value
	// and none is lost. From then on Reserve and ClaimAndExecute of a
	// claim with an older WriterEpoch create nothing (ErrWriterFenced) and
	// Complete of a record with an older WriterEpoch commits nothing
	// (ErrWriterFenced).
	BumpEpoch(ctx context.Context) (int64, error)
	// SetDraining sets the Draining flag; setting it to its current value
	// is not an error (UpdatedAt still moves).
	SetDraining(ctx context.Context, on bool) error
}
