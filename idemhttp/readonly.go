package idemhttp

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// CodeReadOnly (503, with Retry-After): the operation has been enforced
// and this server is configured to serve it off, so it serves it
// read-only — replays and monitor answers only; a new key is refused and
// nothing is executed. Retry with the same key: another server, or this
// one once the operation's rollout changes, takes it. Writing without
// idempotency again needs the rollout turned off with force.
const CodeReadOnly idem.Code = "READ_ONLY"

// serveReadOnly serves an operation that was enforced on a server that
// would serve it off (registry.RolloutReadOnly): identity, body and key as
// enforce (their refusals as enforce), then the scope's record, if any, is
// answered as enforce answers it — replay, 422 conflict, 409 in flight or
// unknown with the monitor link, 409 KEY_RETIRED — and with no record,
// 503 READ_ONLY. It never executes, never takes an operation over and
// never settles one.
func (m *Middleware) serveReadOnly(w http.ResponseWriter, r *http.Request, c *call) {
	w.Header().Set(HeaderContract, idem.ContractVersion)
	if c.idErr != nil {
		if m.Challenge != "" {
			w.Header().Set("WWW-Authenticate", m.Challenge)
		}
		m.refuse(w, idem.CodeUnauthenticated, "authentication required", "")
		return
	}
	body, err := readBody(r, m.Operation.Binding.Canon.MaxBytes)
	if err != nil {
		m.refuseErr(w, r, err)
		return
	}
	req, err := m.Prepare(r, c.id, body)
	if err != nil {
		m.refuseErr(w, r, err)
		return
	}
	rec, err := m.Store.Get(r.Context(), req.Scope)
	if errors.Is(err, registry.ErrNotFound) {
		w.Header().Set("Retry-After", m.readOnlyRetryAfter())
		m.refuse(w, CodeReadOnly, "this server serves the operation read-only: it replays operations but accepts no new ones; retry with the same key", "")
		return
	}
	if err != nil {
		m.refuseErr(w, r, err)
		return
	}
	switch d := Decide(rec, false, req); d.Verdict {
	case registry.Replay:
		m.replay(w, rec)
	case registry.Conflict:
		m.refuse(w, d.Code, "the key was used for a different request", "")
	case registry.Retired:
		m.refuseRetired(w, rec)
	default:
		m.refuseInFlight(w, rec.OperationID, d.Code)
	}
}

// readOnlyRetryAfter is the Retry-After of 503 READ_ONLY: the rollout
// refresh in whole seconds, rounded up — a change of the rollout reaches
// this server within it.
func (m *Middleware) readOnlyRetryAfter() string {
	refresh := DefaultAdmitRefresh
	if m.Rollouts != nil {
		refresh = m.Rollouts.refresh()
	}
	return strconv.FormatInt(int64(max((refresh+time.Second-1)/time.Second, 1)), 10)
}
