package idem

import (
	"errors"
	"fmt"
)

// The storage rules of a response snapshot (SPEC A5): what a registry
// stores is a replayable outcome, so its status is 2xx or 4xx — within
// MinStoredStatus–MaxStoredStatus and not a redirect (a 1xx, 3xx or 5xx
// says nothing final about the operation and is never stored) — and its
// body at most MaxStoredBody bytes.
// Every driver checks them before it writes a response (Complete, the
// one-transaction style, Reconcile) and its database refuses a row that
// breaks them (docs/contract.md, "What the storage layer refuses").
const (
	// MinStoredStatus is the lowest status a stored response may have.
	MinStoredStatus = 200
	// MaxStoredStatus is the highest status a stored response may have.
	MaxStoredStatus = 499
	// MaxStoredBody is the largest body a stored response may have: the
	// snapshot cap (DefaultMaxResponseBody, 64 KiB). It bounds the
	// plaintext; a sealed body may be registry.MaxSealOverhead bytes
	// longer in the database.
	MaxStoredBody = DefaultMaxResponseBody
)

// ErrResponseRefused is what every *ResponseRuleError is (errors.Is): a
// response that breaks the storage rules was not stored, and nothing of
// the outcome it belonged to was written.
var ErrResponseRefused = errors.New("idem: response breaks the storage rules")

// ResponseRuleError says which storage rule a response broke. It is
// ErrResponseRefused, and also ErrResponseTooLarge when its body is too
// large.
type ResponseRuleError struct {
	// Status is the response's status.
	Status int
	// BodySize is the length of its body in bytes.
	BodySize int
}

func (e *ResponseRuleError) Error() string {
	if e.BodySize > MaxStoredBody {
		return fmt.Sprintf("idem: response body of %d bytes exceeds the %d-byte snapshot cap: not stored", e.BodySize, MaxStoredBody)
	}
	return fmt.Sprintf("idem: response status %d is not a 2xx or 4xx: not stored", e.Status)
}

// Is makes e match ErrResponseRefused, and ErrResponseTooLarge for a body
// over the cap.
func (e *ResponseRuleError) Is(target error) bool {
	return target == ErrResponseRefused || (target == ErrResponseTooLarge && e.BodySize > MaxStoredBody)
}

// Storable returns nil when r may be stored, else a *ResponseRuleError.
func (r Response) Storable() error {
	if !StorableStatus(r.Status) || len(r.Body) > MaxStoredBody {
		return &ResponseRuleError{Status: r.Status, BodySize: len(r.Body)}
	}
	return nil
}

// StorableStatus reports whether a response with that status may be
// stored: a 2xx or a 4xx.
func StorableStatus(status int) bool {
	return (status >= MinStoredStatus && status <= 299) || (status >= 400 && status <= MaxStoredStatus)
}
