package canon

import "fmt"

// Refusal codes. They are part of the http.idempotency.v1 contract and never
// change meaning; the root package idem re-exports them as idem.Code values.
const (
	CodeInvalidJSON          = "INVALID_JSON"
	CodeSchemaViolation      = "SCHEMA_VIOLATION"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	CodeBodyTooLarge         = "BODY_TOO_LARGE"
)

// Error is a refusal to canonicalise a payload. Code is one of the Code*
// constants; Offset is the byte offset in the (decoded, UTF-8) input where the
// problem was found, or -1 when it does not apply. Reason is a short English
// phrase that never quotes the payload, so it is safe to return to clients.
type Error struct {
	Code   string
	Offset int
	Reason string
}

func (e *Error) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("%s: %s at byte %d", e.Code, e.Reason, e.Offset)
	}
	return e.Code + ": " + e.Reason
}

// ErrorCode returns e.Code. Packages that cannot import canon branch on this
// method through an interface.
func (e *Error) ErrorCode() string { return e.Code }

func syntaxErr(off int, reason string) *Error {
	return &Error{Code: CodeInvalidJSON, Offset: off, Reason: reason}
}

func schemaErr(path, reason string) *Error {
	if path == "" {
		path = "$"
	}
	return &Error{Code: CodeSchemaViolation, Offset: -1, Reason: path + ": " + reason}
}
