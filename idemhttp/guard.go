package idemhttp

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// enforcedFirst makes sure that the registry records the operation as
// enforced (registry.Rollout.EnforcedAt) before a request served under
// enforce is accepted: a record written under enforce is always preceded
// by a committed EnforcedAt, which shadow (answering from records only
// once it is set) and read-only rely on. With Rollouts it is
// Rollouts.markEnforced; without, the registry is read and, while unset,
// MarkEnforced called, once per Handler (marked). It returns false when
// it answered the request itself: a registry error (fail closed), or a
// row MarkEnforced left unmarked — one an operator set off without force
// since the row in hand was read — which with Rollouts serves the request
// as that row says (off: plainly; shadow: run loses its bound), never
// under enforce, and without Rollouts refuses it. ctx is r's.
func (m *Middleware) enforcedFirst(w http.ResponseWriter, r *http.Request, next http.Handler, marked *atomic.Bool,
	c *call, run *operation.Request, req Request, body []byte) bool {
	if m.Rollouts != nil {
		row, err := m.Rollouts.markEnforced(r.Context(), m.Operation.Name, c.row)
		if err != nil {
			m.refuseErr(w, r, err)
			return false
		}
		if !row.EnforcedAt.IsZero() {
			return true
		}
		c.row, c.mode = row, row.ModeFor(string(m.Operation.EffectiveMode()), c.id)
		switch {
		case c.mode == registry.RolloutOff && m.Operation.Effects == nil:
			m.shadowPlain(w, withBody(r, &execution{}, body), next, c, req.Parts.Payload)
			return false
		case c.shadow():
			run.Unbounded = true
			return true
		}
		m.refuse(w, idem.CodeStoreUnavailable, "the operation's rollout is changing; retry with the same key", "")
		return false
	}
	if marked.Load() {
		return true
	}
	// Read first: once set, no write (on SQLite it would wait for the
	// write lock).
	row, err := m.Store.Rollout(r.Context(), m.Operation.Name)
	if err == nil && row.EnforcedAt.IsZero() {
		row, err = m.Store.MarkEnforced(r.Context(), m.Operation.Name)
	}
	if err != nil {
		m.refuseErr(w, r, fmt.Errorf("idemhttp: marking %s enforced: %w", m.Operation.Name, err))
		return false
	}
	if row.EnforcedAt.IsZero() {
		m.log().Error("the operation's rollout row is off without force: this server, configured to enforce it and following no rollout, refuses it",
			"operation", m.Operation.Name)
		m.refuse(w, idem.CodeStoreUnavailable, "the operation is turned off; retry with the same key", "")
		return false
	}
	marked.Store(true)
	return true
}
