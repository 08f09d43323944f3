package idem_test

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
)

// specStatus is the table of SPEC section R, written out by hand: the code
// of every error and its HTTP status.
var specStatus = map[idem.Code]int{
	"KEY_MISSING":            400,
	"KEY_INVALID":            400,
	"KEY_MULTIPLE":           400,
	"INVALID_JSON":           400,
	"SCHEMA_VIOLATION":       400,
	"PAYLOAD_CONFLICT":       422,
	"IN_PROGRESS":            409,
	"OUTCOME_UNKNOWN":        409,
	"KEY_RETIRED":            409,
	"KEY_LIMIT":              429,
	"WRITER_FENCED":          503,
	"BODY_TOO_LARGE":         413,
	"UNSUPPORTED_MEDIA_TYPE": 415,
	"DRAINING":               503,
	"TENANT_MOVED":           503,
	"STORE_UNAVAILABLE":      503,
	"UNAUTHENTICATED":        401,
	"AMOUNT_LIMIT":           422,

	"MALFORMED_REQUEST":             400,
	"HEADERS_TOO_LARGE":             431,
	"UNSUPPORTED_TRANSFER_ENCODING": 501,
	"HTTP_VERSION_UNSUPPORTED":      505,
}

// serviceCodes are the codes of SPEC R's table that belong to the
// reference service (example/payments defines them), not to the
// library's contract.
var serviceCodes = map[idem.Code]bool{"AMOUNT_LIMIT": true}

func TestCodesMatchSpec(t *testing.T) {
	t.Parallel()
	codes := idem.Codes()
	got := map[idem.Code]bool{}
	for _, c := range codes {
		if got[c] {
			t.Errorf("Codes() lists %s twice", c)
		}
		got[c] = true
	}
	for c := range got {
		want, ok := specStatus[c]
		if !ok {
			t.Errorf("Codes() has %s, which the SPEC table does not list", c)
			continue
		}
		if c.Status() != want {
			t.Errorf("%s.Status() = %d, want %d", c, c.Status(), want)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(specStatus)) {
		if !got[c] && !serviceCodes[c] {
			t.Errorf("Codes() lacks %s", c)
		}
		if got[c] && serviceCodes[c] {
			t.Errorf("Codes() has %s, a code of the reference service", c)
		}
	}
	if len(codes) != len(specStatus)-len(serviceCodes) {
		t.Errorf("Codes() has %d codes, the SPEC table %d of the contract", len(codes), len(specStatus)-len(serviceCodes))
	}
}

// TestCodeConstants checks every exported constant against its wire name,
// so a typo in a constant cannot hide behind a matching typo in Codes().
func TestCodeConstants(t *testing.T) {
	t.Parallel()
	consts := map[idem.Code]string{
		idem.CodeKeyMissing:           "KEY_MISSING",
		idem.CodeKeyInvalid:           "KEY_INVALID",
		idem.CodeKeyMultiple:          "KEY_MULTIPLE",
		idem.CodeInvalidJSON:          "INVALID_JSON",
		idem.CodeSchemaViolation:      "SCHEMA_VIOLATION",
		idem.CodePayloadConflict:      "PAYLOAD_CONFLICT",
		idem.CodeInProgress:           "IN_PROGRESS",
		idem.CodeOutcomeUnknown:       "OUTCOME_UNKNOWN",
		idem.CodeKeyRetired:           "KEY_RETIRED",
		idem.CodeKeyLimit:             "KEY_LIMIT",
		idem.CodeWriterFenced:         "WRITER_FENCED",
		idem.CodeBodyTooLarge:         "BODY_TOO_LARGE",
		idem.CodeUnsupportedMediaType: "UNSUPPORTED_MEDIA_TYPE",
		idem.CodeDraining:             "DRAINING",
		idem.CodeTenantMoved:          "TENANT_MOVED",
		idem.CodeStoreUnavailable:     "STORE_UNAVAILABLE",
		idem.CodeUnauthenticated:      "UNAUTHENTICATED",

		idem.CodeMalformedRequest:            "MALFORMED_REQUEST",
		idem.CodeHeadersTooLarge:             "HEADERS_TOO_LARGE",
		idem.CodeUnsupportedTransferEncoding: "UNSUPPORTED_TRANSFER_ENCODING",
		idem.CodeHTTPVersionUnsupported:      "HTTP_VERSION_UNSUPPORTED",
	}
	if len(consts) != len(specStatus)-len(serviceCodes) {
		t.Fatalf("%d distinct code constants, want %d (two constants share a value?)", len(consts), len(specStatus)-len(serviceCodes))
	}
	for c, name := range consts {
		if string(c) != name {
			t.Errorf("constant for %s has value %q", name, c)
		}
	}
}

func TestUnknownCodeStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []idem.Code{"", "NOPE", "key_missing", "KEY_MISSING "} {
		if got := c.Status(); got != 500 {
			t.Errorf("Code(%q).Status() = %d, want 500", c, got)
		}
	}
}

func TestCanonCodesEqualIdemCodes(t *testing.T) {
	t.Parallel()
	pairs := []struct {
		canon string
		idem  idem.Code
	}{
		{canon.CodeInvalidJSON, idem.CodeInvalidJSON},
		{canon.CodeSchemaViolation, idem.CodeSchemaViolation},
		{canon.CodeUnsupportedMediaType, idem.CodeUnsupportedMediaType},
		{canon.CodeBodyTooLarge, idem.CodeBodyTooLarge},
	}
	for _, p := range pairs {
		if p.canon != string(p.idem) {
			t.Errorf("canon code %q != idem code %q", p.canon, p.idem)
		}
	}
}

func TestCodeOf(t *testing.T) {
	t.Parallel()
	idemErr := &idem.Error{Code: idem.CodeKeyInvalid, Reason: "bad"}
	canonErr := &canon.Error{Code: canon.CodeInvalidJSON, Offset: 3, Reason: "unexpected end"}
	tests := []struct {
		name string
		err  error
		want idem.Code
	}{
		{"nil", nil, ""},
		{"plain error", errors.New("boom"), ""},
		{"wrapped plain error", fmt.Errorf("ctx: %w", io.EOF), ""},
		{"idem error", idemErr, idem.CodeKeyInvalid},
		{"wrapped idem error", fmt.Errorf("parse: %w", idemErr), idem.CodeKeyInvalid},
		{"twice wrapped idem error", fmt.Errorf("a: %w", fmt.Errorf("b: %w", idemErr)), idem.CodeKeyInvalid},
		{"canon error", canonErr, idem.CodeInvalidJSON},
		{"wrapped canon error", fmt.Errorf("fingerprint: %w", canonErr), idem.CodeInvalidJSON},
		{"canon error inside idem error", &idem.Error{Code: idem.CodePayloadConflict, Err: canonErr}, idem.CodePayloadConflict},
		{"idem error wrapping canon error, wrapped", fmt.Errorf("x: %w", &idem.Error{Code: idem.CodeStoreUnavailable, Err: canonErr}), idem.CodeStoreUnavailable},
		{"joined", errors.Join(errors.New("first"), idemErr), idem.CodeKeyInvalid},
		{"not wrapped with %v", fmt.Errorf("parse: %v", idemErr), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := idem.CodeOf(tt.err); got != tt.want {
				t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorMethods(t *testing.T) {
	t.Parallel()
	cause := errors.New("db down")
	e := &idem.Error{Code: idem.CodeStoreUnavailable, Reason: "try again", Err: cause}
	if got, want := e.Error(), "STORE_UNAVAILABLE: try again"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&idem.Error{Code: idem.CodeDraining}).Error(); got != "DRAINING" {
		t.Errorf("Error() without reason = %q, want DRAINING", got)
	}
	if !errors.Is(e, cause) {
		t.Error("errors.Is does not reach the cause")
	}
	if errors.Unwrap(e) != cause {
		t.Error("Unwrap does not return the cause")
	}
	if e.ErrorCode() != "STORE_UNAVAILABLE" {
		t.Errorf("ErrorCode() = %q", e.ErrorCode())
	}
	// The cause is for operators, not clients: Error() must not show it.
	if got := e.Error(); got != "STORE_UNAVAILABLE: try again" {
		t.Errorf("Error() shows the cause: %q", got)
	}
}
