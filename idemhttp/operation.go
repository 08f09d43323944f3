package idemhttp

import (
	"fmt"

	"github.com/idemkit/idem/operation"
)

// Operation configures one idempotent operation: an alias of
// operation.Config, the configuration the transport-agnostic core runs
// (see there for every field and its default). Binding and KeyPolicy are
// what this door reads from the HTTP request; the rest is the core's.
type Operation = operation.Config

// ReplayCache configures the in-process cache of settled records that
// answers replays from memory (Operation.ReplayCache; an alias of
// operation.ReplayCache, which says what a cached answer promises). The
// zero value, the default, is off.
type ReplayCache = operation.ReplayCache

// Mode says how the middleware treats an operation (operation.Mode).
// With Middleware.Rollouts the registry's rollout row, when an operator
// set a mode, overrides it per request (docs/contract.md, "Rollout").
type Mode = operation.Mode

// The modes (operation.Enforce, operation.Shadow, operation.Off).
const (
	Enforce = operation.Enforce
	Shadow  = operation.Shadow
	Off     = operation.Off
)

// DefaultMaxActiveKeys is the default per-principal bound on in-flight
// operations.
const DefaultMaxActiveKeys = operation.DefaultMaxActiveKeys

// validate is op.Validate with this package's error prefix.
func validate(op *Operation) error {
	if err := op.Validate(); err != nil {
		return fmt.Errorf("idemhttp: %w", err)
	}
	return nil
}
