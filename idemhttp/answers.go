package idemhttp

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Answers: how the core's Result is written back over HTTP.

// render writes res for the request c serves: the handler's own
// response (Executed, Released), a stored one (Executed and Rendered,
// Replayed), a refusal, or a plain execution (shadow). c may be nil for
// a Result that is neither Executed, Released nor Plain.
func (m *Middleware) render(w http.ResponseWriter, c *call, res operation.Result) {
	if res.Waited > 0 {
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(res.Waited/time.Second)))
	}
	switch res.Kind {
	case operation.Executed:
		if res.Rendered {
			m.writeStored(w, res.Record, false)
			return
		}
		c.rw.flushTo(w, http.Header{HeaderContract: {idem.ContractVersion}, HeaderOperation: {res.Record.OperationID}})
	case operation.Released:
		c.rw.flushTo(w, http.Header{HeaderContract: {idem.ContractVersion}})
	case operation.Replayed:
		m.Metrics.outcome(m.Operation.Name, "replayed")
		m.writeStored(w, res.Record, true)
	case operation.Plain:
		m.shadowPlain(w, withBody(c.r, &execution{}, c.body), c.next, c, c.payload)
	default:
		m.refusal(w, res.Refusal)
	}
}

// replay writes rec's stored response (operation.Core.Replay): status,
// media type, Location, ETag and body exactly as stored (the driver
// verified its digest), marked as a replay.
func (m *Middleware) replay(w http.ResponseWriter, rec registry.Record) {
	m.render(w, nil, m.refusals().Replay(rec))
}

// writeStored writes rec's stored response, which must not be nil, with
// the contract and operation headers, marked as a replay when replayed.
func (m *Middleware) writeStored(w http.ResponseWriter, rec registry.Record, replayed bool) {
	resp := rec.Response
	h := w.Header()
	h.Set(HeaderContract, idem.ContractVersion)
	h.Set(HeaderOperation, rec.OperationID)
	if replayed {
		h.Set(HeaderReplayed, "true")
	}
	if resp.MediaType != "" {
		h.Set("Content-Type", resp.MediaType)
	}
	if resp.Location != "" {
		h.Set("Location", resp.Location)
	}
	if resp.ETag != "" {
		h.Set("ETag", resp.ETag)
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// refusals is a core for the refusals this door makes outside a run
// (operation.Core.Refuse, Replay): it runs nothing.
func (m *Middleware) refusals() *operation.Core {
	return &operation.Core{Store: m.Store, Config: &m.Operation, Observer: observer{m.Metrics}, Logger: m.Logger}
}

// refuseErr answers an error of serving r (operation.Core.Refuse): a
// contract code if it carries one, 503 STORE_UNAVAILABLE for storage
// trouble (fail closed), except when the store call failed because r's
// own context was cancelled — the client went away, or half-closed its
// connection, before the request was accepted: 499 CLIENT_GONE.
func (m *Middleware) refuseErr(w http.ResponseWriter, r *http.Request, err error) {
	m.refusal(w, m.refusals().Refuse(r.Context(), err).Refusal)
}

// refusal writes rf: Retry-After, the monitor Link, the operation ID and
// the problem.
func (m *Middleware) refusal(w http.ResponseWriter, rf operation.Refusal) {
	if rf.RetryAfter != "" {
		w.Header().Set("Retry-After", rf.RetryAfter)
	}
	if rf.Monitor {
		m.setMonitorLink(w, rf.OperationID)
	}
	m.refuse(w, rf.Code, rf.Detail, rf.OperationID)
}

// refuseRetired answers a retry of an operation whose record is a
// tombstone (SPEC E5): 409 KEY_RETIRED with the operation ID, in the
// Idempotency-Operation header and the problem's operation_id.
func (m *Middleware) refuseRetired(w http.ResponseWriter, rec registry.Record) {
	m.refusal(w, operation.Retired(rec).Refusal)
}

// refuseInFlight answers 409 for the operation opID that has no outcome
// to replay — code IN_PROGRESS or OUTCOME_UNKNOWN — with Retry-After, the
// monitor Link and the operation ID.
func (m *Middleware) refuseInFlight(w http.ResponseWriter, opID string, code idem.Code) {
	m.refusal(w, operation.InFlight(opID, code).Refusal)
}

func (m *Middleware) refuse(w http.ResponseWriter, code idem.Code, detail, operationID string) {
	m.Metrics.outcome(m.Operation.Name, outcomeLabel(code))
	if operationID != "" {
		w.Header().Set(HeaderOperation, operationID)
	}
	Problem{Code: code, Detail: detail, Operation: operationID}.Write(w)
}
