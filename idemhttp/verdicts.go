package idemhttp

import (
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// call is one request's way through the middleware: its caller as
// Identity returned it (resolved once), the rollout row it is served
// under and the mode that gives it, and whether its verdict is counted.
type call struct {
	id    idem.Identity
	idErr error
	// mode is registry.RolloutEnforce, RolloutShadow, RolloutOff or
	// RolloutReadOnly.
	mode string
	row  registry.Rollout
	// enforced: in shadow, the fresh row says the operation has been
	// enforced, so the request is answered from its record as enforce
	// answers it.
	enforced bool
	counted  bool

	// The door's side of the core's run (operation.Door, enforce.go):
	// the request, its body and canonical payload, its handler, and the
	// recorder of its execution.
	m       *Middleware
	w       http.ResponseWriter
	r       *http.Request
	next    http.Handler
	body    []byte
	payload []byte
	rw      *recorder
}

func (c *call) shadow() bool { return c.mode == registry.RolloutShadow }

// plain reports whether a shadow request that enforce would refuse, or
// answer from a record, may execute plainly instead: never for an
// effect-bearing operation (a plain execution would call the downstream
// under a key no record holds) and never once the operation was enforced.
func (c *call) plain(op *Operation) bool {
	return c.shadow() && op.Effects == nil && !c.enforced
}

// count counts c's verdict — what enforce answered, or in shadow would
// have answered — once per request: the first verdict counted is the
// registry's first answer to the request (a duplicate that then waits
// for its operation counts in_flight). In Prometheus
// (idem_rollout_verdicts_total, no tenant) and, with Rollouts, per
// tenant in the registry's totals.
func (m *Middleware) count(c *call, verdict string) {
	if c.counted || (c.mode != registry.RolloutEnforce && c.mode != registry.RolloutShadow) {
		return
	}
	c.counted = true
	m.Metrics.verdict(m.Operation.Name, c.mode, verdict)
	if m.Rollouts != nil {
		m.Rollouts.count(m.Operation.Name, c.id.Tenant, c.mode, verdict) // "" when not authenticated
	}
}

// refusalVerdict is the verdict of a request refused before the registry
// is asked (Prepare's errors).
func refusalVerdict(err error) string {
	switch idem.CodeOf(err) {
	case idem.CodeKeyMissing, idem.CodeKeyInvalid, idem.CodeKeyMultiple:
		return registry.VerdictKeyRefused
	}
	return registry.VerdictRefused
}
