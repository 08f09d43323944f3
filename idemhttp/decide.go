package idemhttp

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Request is an HTTP request reduced to what the contract decides on.
type Request struct {
	Identity    idem.Identity
	Scope       idem.ScopeHash
	Fingerprint idem.Fingerprint
	Parts       idem.FingerprintParts
	// Wait is the Prefer: wait the client asked for, already capped.
	Wait time.Duration
}

// Prepare reduces r (whose body has been read into body) to a Request:
// key, scope (computed with Operation.AcceptsRecordsOf when set, else
// APIRevision), fingerprint and wait preference. It touches no storage.
// Refusals are errors carrying a contract code (idem.CodeOf).
func (m *Middleware) Prepare(r *http.Request, id idem.Identity, body []byte) (Request, error) {
	op := &m.Operation
	key, err := idem.ParseKey(r.Header.Values(idem.KeyHeader), op.KeyPolicy)
	if err != nil {
		return Request{}, err
	}
	fp, parts, err := op.Binding.Fingerprint(r.Method, r.URL, r.Header, body)
	if err != nil {
		return Request{}, err
	}
	return Request{
		Identity:    id,
		Scope:       idem.ScopeOf(id, op.Name, op.ScopeRevision(), key),
		Fingerprint: fp,
		Parts:       parts,
		Wait:        min(preferWait(r.Header), m.waitCap()),
	}, nil
}

// Decision is what the middleware does with a prepared request once the
// registry has answered (operation.Decision).
type Decision = operation.Decision

// Decide is the pure decision (operation.Decide): given the record for
// the request's scope and whether this request created it, what to
// answer.
func Decide(rec registry.Record, created bool, req Request) Decision {
	return operation.Decide(rec, created, operation.Request{Fingerprint: req.Fingerprint, Wait: req.Wait})
}

// preferWait returns the wait preference of RFC 7240 (Prefer: wait=N, N
// in seconds), or 0.
func preferWait(h http.Header) time.Duration {
	for _, line := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(line, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			val, _, _ = strings.Cut(val, ";")
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err == nil && n > 0 {
				return time.Duration(min(n, 3600)) * time.Second
			}
		}
	}
	return 0
}

// readBody reads the whole body, refusing more than limit bytes while
// reading (the rest is never read). A body that cannot be read (a broken
// chunked encoding, a read timeout, a client gone) is MALFORMED_REQUEST,
// one cut short by an http.MaxBytesReader BODY_TOO_LARGE: neither is the
// registry's trouble.
func readBody(r *http.Request, limit int) ([]byte, error) {
	limit = cmp.Or(max(limit, 0), canon.DefaultMaxBytes)
	// The refusals are built only when refused: a body read costs no
	// allocation for them.
	tooLarge := func() error {
		return &idem.Error{Code: idem.CodeBodyTooLarge, Reason: "body larger than " + strconv.Itoa(limit) + " bytes"}
	}
	if r.ContentLength > int64(limit) {
		return nil, tooLarge()
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, &idem.Error{Code: idem.CodeBodyTooLarge, Reason: "body larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes", Err: err}
		}
		return nil, &idem.Error{Code: idem.CodeMalformedRequest, Reason: "the body could not be read", Err: err}
	}
	if len(b) > limit {
		return nil, tooLarge()
	}
	return b, nil
}

// withBody returns a shallow copy of r for the handler, carrying ctx and
// a fresh reader over the already-read body.
func withBody(r *http.Request, e *execution, body []byte) *http.Request {
	r2 := r.WithContext(withExecution(r.Context(), e))
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	return r2
}
