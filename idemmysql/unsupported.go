package idemmysql

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/registry"
)

// ErrNotImplemented is wrapped by the methods of registry.Store this
// driver does not implement yet: effects and reconciliation, lease
// scanning, outbox failures and dead letters, the audit log, prune runs
// and pruning, downstream lookups and settlements, and rollouts (see
// doc.go). They fail closed, without touching the database; the
// conformance cases that use them fail, and say so.
var ErrNotImplemented = errors.New("idemmysql: not implemented yet")

// unsupported supplies those methods to Store.
type unsupported struct{}

func notYet(method string) error { return fmt.Errorf("%w: %s", ErrNotImplemented, method) }

func (unsupported) Rollouts(context.Context) ([]registry.Rollout, error) {
	return nil, notYet("Rollouts")
}
func (unsupported) Rollout(context.Context, string) (registry.Rollout, error) {
	return registry.Rollout{}, notYet("Rollout")
}
func (unsupported) SetRollout(context.Context, registry.RolloutChange) (registry.Rollout, error) {
	return registry.Rollout{}, notYet("SetRollout")
}
func (unsupported) MarkEnforced(context.Context, string) (registry.Rollout, error) {
	return registry.Rollout{}, notYet("MarkEnforced")
}
func (unsupported) AddVerdicts(context.Context, []registry.VerdictCount) error {
	return notYet("AddVerdicts")
}
func (unsupported) Verdicts(context.Context, string) ([]registry.VerdictCount, error) {
	return nil, notYet("Verdicts")
}
