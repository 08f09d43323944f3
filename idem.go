package idem

import (
	"errors"
	"maps"
	"net/http"
	"slices"
)

// ContractVersion names the contract this package implements. It is echoed
// in the Idempotency-Contract response header and stored with every record.
const ContractVersion = "http.idempotency.v1"

// Code is a stable error code of the contract. Clients branch on it; its
// meaning never changes within a contract version.
type Code string

// The codes of http.idempotency.v1 (docs/contract.md, "Errors").
const (
	CodeKeyMissing           Code = "KEY_MISSING"
	CodeKeyInvalid           Code = "KEY_INVALID"
	CodeKeyMultiple          Code = "KEY_MULTIPLE"
	CodeInvalidJSON          Code = "INVALID_JSON"
	CodeSchemaViolation      Code = "SCHEMA_VIOLATION"
	CodePayloadConflict      Code = "PAYLOAD_CONFLICT"
	CodeInProgress           Code = "IN_PROGRESS"
	CodeOutcomeUnknown       Code = "OUTCOME_UNKNOWN"
	CodeKeyRetired           Code = "KEY_RETIRED"
	CodeKeyLimit             Code = "KEY_LIMIT"
	CodeWriterFenced         Code = "WRITER_FENCED"
	CodeBodyTooLarge         Code = "BODY_TOO_LARGE"
	CodeUnsupportedMediaType Code = "UNSUPPORTED_MEDIA_TYPE"
	CodeDraining             Code = "DRAINING"
	// CodeTenantMoved: the registry that received the request no longer
	// takes writes for the caller's tenant (fenced: it moved to another
	// registry). 503 with Retry-After; nothing was done.
	CodeTenantMoved      Code = "TENANT_MOVED"
	CodeStoreUnavailable Code = "STORE_UNAVAILABLE"
	CodeUnauthenticated  Code = "UNAUTHENTICATED"

	// Refusals of requests the HTTP server cannot read; net/http answers
	// them before any handler runs (idemhttp.ProblemListener), and
	// MALFORMED_REQUEST also answers a body that cannot be read.
	CodeMalformedRequest            Code = "MALFORMED_REQUEST"
	CodeHeadersTooLarge             Code = "HEADERS_TOO_LARGE"
	CodeUnsupportedTransferEncoding Code = "UNSUPPORTED_TRANSFER_ENCODING"
	CodeHTTPVersionUnsupported      Code = "HTTP_VERSION_UNSUPPORTED"
)

var codeStatus = map[Code]int{
	CodeKeyMissing:           http.StatusBadRequest,
	CodeKeyInvalid:           http.StatusBadRequest,
	CodeKeyMultiple:          http.StatusBadRequest,
	CodeInvalidJSON:          http.StatusBadRequest,
	CodeSchemaViolation:      http.StatusBadRequest,
	CodePayloadConflict:      http.StatusUnprocessableEntity,
	CodeInProgress:           http.StatusConflict,
	CodeOutcomeUnknown:       http.StatusConflict,
	CodeKeyRetired:           http.StatusConflict,
	CodeKeyLimit:             http.StatusTooManyRequests,
	CodeWriterFenced:         http.StatusServiceUnavailable,
	CodeBodyTooLarge:         http.StatusRequestEntityTooLarge,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	CodeDraining:             http.StatusServiceUnavailable,
	CodeTenantMoved:          http.StatusServiceUnavailable,
	CodeStoreUnavailable:     http.StatusServiceUnavailable,
	CodeUnauthenticated:      http.StatusUnauthorized,

	CodeMalformedRequest:            http.StatusBadRequest,
	CodeHeadersTooLarge:             http.StatusRequestHeaderFieldsTooLarge,
	CodeUnsupportedTransferEncoding: http.StatusNotImplemented,
	CodeHTTPVersionUnsupported:      http.StatusHTTPVersionNotSupported,
}

// Codes returns every code of the contract, sorted.
func Codes() []Code {
	return slices.Sorted(maps.Keys(codeStatus))
}

// Status is the HTTP status the contract gives c, or 500 for a code it
// does not know.
func (c Code) Status() int {
	if s, ok := codeStatus[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is an error with a contract Code. Reason is safe to show to the
// client: it never quotes a stored request or response. Err, if set, is
// the underlying cause and is not shown to clients.
type Error struct {
	Code   Code
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Reason == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Reason
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns the code as a string, the interface by which packages
// that do not import idem report codes.
func (e *Error) ErrorCode() string { return string(e.Code) }

// CodeOf returns the contract code carried by err or anything it wraps
// (any error with an ErrorCode() string method, such as *Error and
// *canon.Error), or "" if there is none.
func CodeOf(err error) Code {
	var c interface{ ErrorCode() string }
	if errors.As(err, &c) {
		return Code(c.ErrorCode())
	}
	return ""
}
