// Package registrytest is THE conformance suite of registry drivers: the
// definition of what a driver means. Every driver's tests call Run with a
// Harness that gives the suite a fresh, migrated database.
package registrytest

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// Harness is what a driver hands the suite for one test: a Store on a
// fresh, migrated, empty database of its own, plus the few things the
// suite cannot do through the Store interface.
type Harness struct {
	// Store is the driver under test. The suite does not close it; the
	// driver's test cleanup does.
	Store registry.Store

	// ClaimAndExecute runs the driver's in-transaction style: it begins a
	// native transaction on the same database, calls the driver's
	// ClaimAndExecute with it, and commits it if fn succeeded and the
	// verdict is Execute; if fn fails it rolls back and returns fn's error.
	ClaimAndExecute func(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error)

	// ClaimAndExecuteSQL, when the driver's ClaimAndExecute takes some
	// other transaction than a *sql.Tx (PostgreSQL's pgx.Tx), runs the
	// in-transaction style as ClaimAndExecute does but on a *sql.Tx of the
	// caller's (idempg's ClaimAndExecuteSQL); the suite uses it where the
	// business function asks for a *sql.Tx (registry.SQLTx). nil: the
	// driver's ClaimAndExecute already hands one.
	ClaimAndExecuteSQL func(ctx context.Context, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error)

	// Exec runs one statement outside any transaction ($1 … placeholders).
	Exec func(ctx context.Context, sql string, args ...any) error

	// QueryInt runs a query that returns one integer.
	QueryInt func(ctx context.Context, sql string, args ...any) (int64, error)

	// SetNow sets the time the store uses as "now" from here on, in place
	// of database time; the zero time restores database time.
	SetNow func(t time.Time)

	// FailClaims makes every later attempt to insert a claim for the
	// named operation fail with a database error that is not a unique
	// conflict (a statement timeout on PostgreSQL, an aborting trigger on
	// SQLite), so the suite can check such errors are surfaced as they
	// are.
	FailClaims func(ctx context.Context, operation string) error

	// Sealed opens another Store of the driver on the same database with
	// the given Sealer (the driver's Options.Sealer), closed when t ends.
	// It must also implement registry.Resealer.
	Sealed func(t *testing.T, s registry.Sealer) registry.Store

	// DropGuards removes or disables every trigger on idem_operations and
	// idem_effects, as
	// a database writer with the rights to do so would, so the suite can
	// check that what the key ring authenticates fails closed without
	// them.
	DropGuards func(ctx context.Context) error

	// Name is the driver's name, used in subtest names.
	Name string
}

// NewHarness makes a Harness on a fresh database for t; the driver
// registers cleanups on t.
type NewHarness func(t *testing.T) *Harness
