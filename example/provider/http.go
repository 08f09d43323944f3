package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemkit/idem/canon"
)

// Problem codes answered by the provider.
const (
	codeKeyMissing      = "KEY_MISSING"
	codeKeyMultiple     = "KEY_MULTIPLE"
	codeKeyInvalid      = "KEY_INVALID"
	codeInvalidJSON     = "INVALID_JSON"
	codeModeInvalid     = "MODE_INVALID"
	codeInvalidQuery    = "INVALID_QUERY"
	codeBodyTooLarge    = "BODY_TOO_LARGE"
	codePayloadConflict = "PAYLOAD_CONFLICT"
	codeDeclined        = "DECLINED"
	codeNotFound        = "NOT_FOUND"
	codeFailure         = "PROVIDER_FAILURE"
)

// statusOf maps a problem code to its HTTP status.
var statusOf = map[string]int{
	codeKeyMissing:      http.StatusBadRequest,
	codeKeyMultiple:     http.StatusBadRequest,
	codeKeyInvalid:      http.StatusBadRequest,
	codeInvalidJSON:     http.StatusBadRequest,
	codeModeInvalid:     http.StatusBadRequest,
	codeInvalidQuery:    http.StatusBadRequest,
	codeBodyTooLarge:    http.StatusRequestEntityTooLarge,
	codePayloadConflict: http.StatusUnprocessableEntity,
	codeDeclined:        http.StatusUnprocessableEntity,
	codeNotFound:        http.StatusNotFound,
	codeFailure:         http.StatusServiceUnavailable,
}

// declinedProblem is the answer to a declined key, the same bytes on
// every repeat.
var declinedProblem = problemBody(codeDeclined, "the provider declined the transfer; it will never execute with this key")

// maxKeyLen is the longest Idempotency-Key accepted.
const maxKeyLen = 255

// copied are the request members a transfer repeats, in output order.
var copied = []string{"amount", "currency", "payee", "reference"}

// Handler returns the provider's routes (see the package documentation).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /transfers", s.postTransfer)
	mux.HandleFunc("GET /transfers/{key}", s.getTransfer)
	mux.HandleFunc("GET /transfers", s.listTransfers)
	mux.HandleFunc("GET /stats", s.getStats)
	mux.HandleFunc("POST /control", s.postControl)
	mux.HandleFunc("GET /control", s.getControl)
	return mux
}

func (s *Server) postTransfer(w http.ResponseWriter, r *http.Request) {
	key, code, detail := requestKey(r.Header)
	if code != "" {
		writeProblem(w, code, detail)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, fields, err := canonicalObject(body)
	if err != nil {
		writeProblem(w, codeInvalidJSON, err.Error())
		return
	}
	if s.latency > 0 {
		// The round trip of a remote provider (Options.Latency): nothing
		// is decided before it has passed.
		t := time.NewTimer(s.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			panic(http.ErrAbortHandler)
		}
	}

	s.mu.Lock()
	out, err := s.postLocked(r.Context(), key, req, fields)
	s.mu.Unlock()
	if err != nil {
		// Held until the client left or the server stopped; in ModeHang
		// the effect happened and the answer is lost.
		panic(http.ErrAbortHandler)
	}

	h := w.Header()
	switch {
	case out.conflict:
		writeProblem(w, codePayloadConflict, "the key was used with another request body")
		return
	case out.unsaved:
		writeProblem(w, codeFailure, "the provider could not record the transfer in its state file")
		return
	case out.failed && out.t == nil:
		writeProblem(w, codeFailure, "the provider is in fail mode; nothing was executed")
		return
	case out.failed:
		writeProblem(w, codeFailure, "the provider failed after executing the transfer")
		return
	}
	if out.replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	if out.t.declined {
		writeBody(w, http.StatusUnprocessableEntity, "application/problem+json", out.t.response)
		return
	}
	h.Set("Location", "/transfers/"+url.PathEscape(key))
	writeJSON(w, http.StatusCreated, out.t.response)
}

func (s *Server) getTransfer(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if body, ok := s.Transfer(key); ok {
		writeJSON(w, http.StatusOK, body)
		return
	}
	if s.IsDeclined(key) {
		writeJSON(w, http.StatusOK, mustMarshal(struct {
			Key    string `json:"key"`
			Status string `json:"status"`
			Code   string `json:"code"`
		}{key, "declined", codeDeclined}))
		return
	}
	writeProblem(w, codeNotFound, "no transfer was executed or declined with this key so far")
}

func (s *Server) listTransfers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Transfers())
}

func (s *Server) getStats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	executed, declined := len(s.executed), s.declined
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, mustMarshal(struct {
		Executed int `json:"executed"`
		Declined int `json:"declined"`
	}{executed, declined}))
}

func (s *Server) postControl(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var c struct {
		Mode  string `json:"mode"`
		Count int    `json:"count"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		writeProblem(w, codeInvalidJSON, "the body is not a JSON object with a mode member and an optional count")
		return
	}
	if c.Count < 0 {
		writeProblem(w, codeModeInvalid, "count must not be negative")
		return
	}
	if err := s.SetModeCount(Mode(c.Mode), c.Count); err != nil {
		writeProblem(w, codeModeInvalid, "mode must be "+modeNames)
		return
	}
	writeJSON(w, http.StatusOK, mustMarshal(struct {
		Mode  Mode `json:"mode"`
		Count int  `json:"count,omitempty"`
	}{Mode(c.Mode), c.Count}))
}

func (s *Server) getControl(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query().Get("wait_hung"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 {
			writeProblem(w, codeInvalidQuery, "wait_hung must be a non-negative integer")
			return
		}
		if s.WaitHung(r.Context(), n) != nil {
			return // the client left
		}
	}
	s.mu.Lock()
	m, hung, left := s.mode, s.hung, s.left
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, mustMarshal(struct {
		Mode  Mode `json:"mode"`
		Hung  int  `json:"hung"`
		Count int  `json:"count,omitempty"`
	}{m, hung, left}))
}

// requestKey returns the request's Idempotency-Key, or the code and detail
// of a problem refusing it.
func requestKey(h http.Header) (key, code, detail string) {
	vals := h.Values("Idempotency-Key")
	switch {
	case len(vals) == 0 || len(vals) == 1 && vals[0] == "":
		return "", codeKeyMissing, "an Idempotency-Key header is required"
	case len(vals) > 1:
		return "", codeKeyMultiple, "exactly one Idempotency-Key header is allowed"
	}
	key = vals[0]
	if len(key) > maxKeyLen {
		return "", codeKeyInvalid, "the Idempotency-Key is longer than " + strconv.Itoa(maxKeyLen) + " characters"
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", codeKeyInvalid, "the Idempotency-Key must be visible ASCII characters"
		}
	}
	return key, "", ""
}

// readBody reads at most MaxBody bytes of the request body; when it cannot,
// it answers the problem and returns false.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeProblem(w, codeBodyTooLarge, "the body is larger than "+strconv.Itoa(MaxBody)+" bytes")
		} else {
			writeProblem(w, codeInvalidJSON, "the body could not be read")
		}
		return nil, false
	}
	return body, true
}

// canonicalObject returns the canonical JSON of body, which must be a JSON
// object, and its members, themselves canonical.
func canonicalObject(body []byte) ([]byte, map[string]json.RawMessage, error) {
	req, err := canon.Options{Mode: canon.ModeJSON, MaxBytes: MaxBody}.Append(nil, body)
	if err != nil {
		return nil, nil, err
	}
	var fields map[string]json.RawMessage
	if len(req) == 0 || req[0] != '{' || json.Unmarshal(req, &fields) != nil {
		return nil, nil, errors.New("the body is not a JSON object")
	}
	return req, fields, nil
}

// appendTransfer appends the JSON of a new transfer to dst.
func appendTransfer(dst []byte, id, key string, fields map[string]json.RawMessage, created time.Time) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"key":`...)
	dst = appendString(dst, key)
	for _, name := range copied {
		if v, ok := fields[name]; ok {
			dst = append(dst, ',')
			dst = appendString(dst, name)
			dst = append(dst, ':')
			dst = append(dst, v...) // canonical already
		}
	}
	dst = append(dst, `,"status":"executed","created_at":`...)
	dst = appendString(dst, created.Format(time.RFC3339Nano))
	return append(dst, '}')
}

// appendString appends s as a JSON string, without HTML escaping.
func appendString(dst []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed struct types are marshalled
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	writeBody(w, status, "application/json", body)
}

func writeBody(w http.ResponseWriter, status int, mediaType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", mediaType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

// writeProblem answers an RFC 9457 problem with code's status. detail
// never quotes the request. Written here rather than with
// idemhttp.Problem: the provider stands for an external system, so it
// shares no code path with the middleware whose callers it serves (its
// only idem import is canon, for comparing bodies).
func writeProblem(w http.ResponseWriter, code, detail string) {
	writeBody(w, statusOf[code], "application/problem+json", problemBody(code, detail))
}

// problemBody is the JSON of a problem with code's status.
func problemBody(code, detail string) []byte {
	status := statusOf[code]
	return mustMarshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Code   string `json:"code"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", http.StatusText(status), status, code, detail})
}
