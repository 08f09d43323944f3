package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
)

// CodeResponseTooLarge: the handler's response exceeded the snapshot cap,
// so its outcome could not be stored; nothing was committed.
const CodeResponseTooLarge = operation.CodeResponseTooLarge

// CodeResponseUnreadable: the operation's stored response is sealed at
// rest (registry.Sealer) and could not be opened — its key is not in this
// server's key ring, or the sealed body does not belong to this record. It
// is never served; 503 with Retry-After, since an operator can restore the
// key. Nothing was executed.
const CodeResponseUnreadable = operation.CodeResponseUnreadable

// CodeHandlerError (500): a statement the handler ran through Tx failed,
// so its transaction could not commit (PostgreSQL aborts a transaction at
// its first failed statement), yet the handler answered as if it had
// succeeded; nothing was recorded and the key is free again. A defect of
// the handler, never storage trouble: counted as handler_error.
const CodeHandlerError = operation.CodeHandlerError

// CodeClientGone (499, the status servers log for a client that closed
// its request): the client's request ended — its connection closed, or
// was half-closed after the request was sent — before the request was
// accepted; nothing was accepted. It is counted as client_gone in
// idem_requests_total, never as storage trouble. Usually nobody reads it;
// a client that only half-closed its side does.
const CodeClientGone = operation.CodeClientGone

// StatusClientGone is CodeClientGone's status.
const StatusClientGone = 499

// Problem is an RFC 9457 problem detail with the contract's code member.
type Problem struct {
	Type      string    `json:"type"`
	Title     string    `json:"title"`
	Status    int       `json:"status"`
	Code      idem.Code `json:"code"`
	Detail    string    `json:"detail,omitempty"`
	Operation string    `json:"operation_id,omitempty"`
}

// WriteProblem writes an application/problem+json response for code with
// the status the contract assigns it. detail must be safe to show the
// client: it never quotes a stored request or response.
func WriteProblem(w http.ResponseWriter, code idem.Code, detail string) {
	Problem{Code: code, Detail: detail}.Write(w)
}

// Write writes p as an application/problem+json response, not to be
// cached; a STORE_UNAVAILABLE or RESPONSE_UNREADABLE refusal carries
// Retry-After: 1 unless one is set. A zero Status is the one the contract assigns p.Code (for codes
// of a service's own, set it); Type is always "about:blank", since the
// code member carries the meaning; an empty Title is the status text.
func (p Problem) Write(w http.ResponseWriter) {
	status, body := p.Marshal()
	h := w.Header()
	if (p.Code == idem.CodeStoreUnavailable || p.Code == CodeResponseUnreadable) && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1") // storage trouble: nothing is known, retry with the same key
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

// Marshal returns the status and the JSON body Write sends, for a
// response built without a ResponseWriter (a rendered outcome).
func (p Problem) Marshal() (status int, body []byte) {
	if p.Status == 0 {
		p.Status = statusOf(p.Code)
	}
	p.Type = "about:blank" // the code member carries the meaning
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if p.Title == "" && p.Status == StatusClientGone {
		p.Title = "Client Closed Request"
	}
	body, _ = json.Marshal(p)
	return p.Status, body
}

func statusOf(c idem.Code) int {
	switch c {
	case CodeResponseTooLarge, CodeHandlerError:
		return http.StatusInternalServerError
	case CodeResponseUnreadable, CodeReadOnly:
		return http.StatusServiceUnavailable
	case CodeClientGone:
		return StatusClientGone
	}
	return c.Status()
}
