package idemhttp

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/registry"
)

// Answers from a record, and refusals.

// replay writes a stored response: status, media type, Location, ETag and
// body exactly as stored (the driver verified its digest), marked as a
// replay.
func (m *Middleware) replay(w http.ResponseWriter, rec registry.Record) {
	if rec.Retired() {
		m.refuseRetired(w, rec)
		return
	}
	if rec.Response == nil {
		m.refuse(w, idem.CodeStoreUnavailable, "the stored outcome is not available", "")
		return
	}
	m.Metrics.outcome(m.Operation.Name, "replayed")
	m.writeStored(w, rec, true)
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

// refuseErr answers an error of serving r: a contract code if it
// carries one, 503 STORE_UNAVAILABLE for storage trouble (fail closed),
// except when the store call failed because r's own context was
// cancelled (gone) — the client went away, or half-closed its
// connection, before the request was accepted, which says nothing about
// the store: 499 CLIENT_GONE (clientGone).
func (m *Middleware) refuseErr(w http.ResponseWriter, r *http.Request, err error) {
	code := idem.CodeOf(err)
	if (code == "" || code == idem.CodeStoreUnavailable) && gone(r, err) {
		m.clientGone(w, r, err)
		return
	}
	switch {
	case errors.Is(err, registry.ErrActiveLimit):
		code = idem.CodeKeyLimit
	case errors.Is(err, registry.ErrWriterFenced):
		code = idem.CodeWriterFenced
	case errors.Is(err, registry.ErrTenantMoved):
		m.refuseTenantMoved(w)
		return
	case errors.Is(err, registry.ErrTampered):
		code = CodeResponseUnreadable
		m.Metrics.tamper(m.Operation.Name)
		m.log().Error("stored body fails authentication: possible tampering with the database; not replayed",
			"operation", m.Operation.Name, "err", err)
	case errors.Is(err, registry.ErrUnreadable):
		code = CodeResponseUnreadable
		m.log().Error("stored body cannot be opened", "operation", m.Operation.Name, "err", err)
	case code == "" && (errors.Is(err, registry.ErrUnavailable) || errors.Is(err, idem.ErrDigestMismatch)):
		code = idem.CodeStoreUnavailable
		m.log().Error("registry unavailable", "operation", m.Operation.Name, "err", err)
	case code == "":
		code = idem.CodeStoreUnavailable
		m.log().Error("registry error", "operation", m.Operation.Name, "err", err)
	}
	var detail string
	var ie *idem.Error
	var ce *canon.Error
	switch {
	case code == idem.CodeStoreUnavailable:
	case code == CodeResponseUnreadable:
		detail = "the stored outcome of this operation cannot be read by this server; nothing was executed"
	case code == idem.CodeKeyLimit:
		detail = "too many operations in progress for this principal"
		w.Header().Set("Retry-After", m.keyLimitRetryAfter())
	case errors.As(err, &ie):
		detail = ie.Reason
	case errors.As(err, &ce):
		detail = ce.Reason
		if ce.Offset >= 0 {
			detail += " at byte " + strconv.Itoa(ce.Offset)
		}
	}
	m.refuse(w, code, detail, "")
}

// refuseTenantMoved answers a request the registry refused because the
// caller's tenant is fenced there (registry.ErrTenantMoved): it moved, or
// is moving, to another registry. 503 TENANT_MOVED with Retry-After: 1 —
// nothing was accepted, and a retry with the same key, once the shard map
// names the tenant's new registry, lands there (where its old keys
// replay).
func (m *Middleware) refuseTenantMoved(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	m.refuse(w, idem.CodeTenantMoved, "this tenant's operations moved to another registry; nothing was done — retry with the same key", "")
}

// keyLimitRetryAfter is the Retry-After of a 429 KEY_LIMIT: the
// operation's lease in whole seconds, rounded up. By then every execution
// in flight when the refusal was sent has finished, or its lease has
// expired and recovery may take it over, so a slot may be free.
func (m *Middleware) keyLimitRetryAfter() string {
	lease := registry.LeaseOrDefault(m.Operation.Lease)
	return strconv.FormatInt(int64(max((lease+time.Second-1)/time.Second, 1)), 10)
}

// refuseRetired answers a retry of an operation whose record is a
// tombstone (SPEC E5): 409 KEY_RETIRED with the operation ID, in the
// Idempotency-Operation header and the problem's operation_id. The stored
// response is gone, so it can be neither replayed nor run again; no
// Retry-After, since retrying cannot help.
func (m *Middleware) refuseRetired(w http.ResponseWriter, rec registry.Record) {
	m.refuse(w, idem.CodeKeyRetired, "the operation with this key finished and its stored response has expired; "+
		"it is neither replayed nor run again", rec.OperationID)
}

func (m *Middleware) refuse(w http.ResponseWriter, code idem.Code, detail, operationID string) {
	m.Metrics.outcome(m.Operation.Name, outcomeLabel(code))
	if operationID != "" {
		w.Header().Set(HeaderOperation, operationID)
	}
	Problem{Code: code, Detail: detail, Operation: operationID}.Write(w)
}
