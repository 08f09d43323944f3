package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The JSONTestSuite (testdata/jsontestsuite, MIT, copied from
// github.com/nst/JSONTestSuite) has three kinds of parsing cases:
// y_ must be accepted, n_ must be refused, i_ are implementation-defined.
const suiteDir = "testdata/jsontestsuite/test_parsing"

// suiteDuplicates are y_ cases that the contract (C6: duplicate member names
// are refused) deliberately turns into refusals.
var suiteDuplicates = map[string]bool{
	"y_object_duplicated_key.json":           true,
	"y_object_duplicated_key_and_value.json": true,
}

// suiteImplementationDefined records what ModeJSON does with every i_ case
// (true = accepted). Options.Append reads UTF-8 only; charset decoding is
// the media-type layer's job (see TestSuiteUTF16ViaCharset).
//
//   - Numbers: accepted when the value fits a double, even if precision is
//     lost (huge integers are kept lexically; 1e-999 underflows to 0 and is
//     kept as written). Values that overflow a double (1e999, -1e999,
//     123123e100000 …) are refused: the contract forbids numbers outside
//     the range of a double.
//   - Strings: lone or mis-ordered surrogates in \u escapes, invalid UTF-8,
//     overlong forms, UTF-8 encoded surrogates and code points above
//     U+10FFFF are all refused.
//   - UTF-16 bodies without a charset and a UTF-8 byte order mark are
//     refused (RFC 8259: JSON text is UTF-8 without a BOM).
//   - 500 nested arrays exceed DefaultMaxDepth (64) and are refused.
var suiteImplementationDefined = map[string]bool{
	"i_number_double_huge_neg_exp.json":                   true,
	"i_number_huge_exp.json":                              false,
	"i_number_neg_int_huge_exp.json":                      false,
	"i_number_pos_double_huge_exp.json":                   false,
	"i_number_real_neg_overflow.json":                     false,
	"i_number_real_pos_overflow.json":                     false,
	"i_number_real_underflow.json":                        true,
	"i_number_too_big_neg_int.json":                       true,
	"i_number_too_big_pos_int.json":                       true,
	"i_number_very_big_negative_int.json":                 true,
	"i_object_key_lone_2nd_surrogate.json":                false,
	"i_string_1st_surrogate_but_2nd_missing.json":         false,
	"i_string_1st_valid_surrogate_2nd_invalid.json":       false,
	"i_string_UTF-16LE_with_BOM.json":                     false,
	"i_string_UTF-8_invalid_sequence.json":                false,
	"i_string_UTF8_surrogate_U+D800.json":                 false,
	"i_string_incomplete_surrogate_and_escape_valid.json": false,
	"i_string_incomplete_surrogate_pair.json":             false,
	"i_string_incomplete_surrogates_escape_valid.json":    false,
	"i_string_invalid_lonely_surrogate.json":              false,
	"i_string_invalid_surrogate.json":                     false,
	"i_string_invalid_utf-8.json":                         false,
	"i_string_inverted_surrogates_U+1D11E.json":           false,
	"i_string_iso_latin_1.json":                           false,
	"i_string_lone_second_surrogate.json":                 false,
	"i_string_lone_utf8_continuation_byte.json":           false,
	"i_string_not_in_unicode_range.json":                  false,
	"i_string_overlong_sequence_2_bytes.json":             false,
	"i_string_overlong_sequence_6_bytes.json":             false,
	"i_string_overlong_sequence_6_bytes_null.json":        false,
	"i_string_truncated-utf-8.json":                       false,
	"i_string_utf16BE_no_BOM.json":                        false,
	"i_string_utf16LE_no_BOM.json":                        false,
	"i_structure_500_nested_arrays.json":                  false,
	"i_structure_UTF-8_BOM_empty_object.json":             false,
}

func suiteFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(suiteDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	// 95 y_, 188 n_ and 35 i_ cases in the copied revision; fewer means the
	// copy is broken and the test would pass vacuously.
	if len(files) < 318 {
		t.Fatalf("found %d suite files in %s, want at least 318", len(files), suiteDir)
	}
	return files
}

// canonJSON runs ModeJSON and turns a panic into a test failure naming the case.
func canonJSON(t *testing.T, name string, body []byte) (out []byte, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s: panic: %v", name, r)
		}
	}()
	return Options{Mode: ModeJSON}.Append(nil, body)
}

func wantCode(t *testing.T, name string, err error, code string) {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: error %v (%T), want *canon.Error with code %s", name, err, err, code)
	}
	if ce.Code != code {
		t.Fatalf("%s: code %s (%v), want %s", name, ce.Code, err, code)
	}
}

func TestJSONTestSuite(t *testing.T) {
	t.Parallel()
	seenI := map[string]bool{}
	for _, path := range suiteFiles(t) {
		name := filepath.Base(path)
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(name, "y_"):
			out, err := canonJSON(t, name, body)
			if suiteDuplicates[name] {
				wantCode(t, name, err, CodeInvalidJSON)
				continue
			}
			if err != nil {
				t.Errorf("%s: refused: %v", name, err)
				continue
			}
			checkCanonical(t, name, out)
		case strings.HasPrefix(name, "n_"):
			out, err := canonJSON(t, name, body)
			if err == nil {
				t.Errorf("%s: accepted as %q", name, out)
				continue
			}
			wantCode(t, name, err, CodeInvalidJSON)
		case strings.HasPrefix(name, "i_"):
			seenI[name] = true
			out, err := canonJSON(t, name, body)
			accepted := err == nil
			if accepted {
				t.Logf("%s: accepted as %q", name, out)
				checkCanonical(t, name, out)
			} else {
				var ce *Error
				if !errors.As(err, &ce) {
					t.Errorf("%s: refused with %T %v, want *canon.Error", name, err, err)
				}
				t.Logf("%s: refused: %v", name, err)
			}
			want, known := suiteImplementationDefined[name]
			if !known {
				t.Errorf("%s: not in suiteImplementationDefined; add it (accepted=%v)", name, accepted)
			} else if accepted != want {
				t.Errorf("%s: accepted=%v, table says %v: behaviour changed", name, accepted, want)
			}
		default:
			t.Errorf("%s: unexpected file in the suite", name)
		}
	}
	for name := range suiteImplementationDefined {
		if !seenI[name] {
			t.Errorf("%s: in suiteImplementationDefined but not in %s", name, suiteDir)
		}
	}
}

// checkCanonical asserts that out, an accepted canonical payload, is a fixed
// point of ModeJSON and is valid JSON for encoding/json.
func checkCanonical(t *testing.T, name string, out []byte) {
	t.Helper()
	again, err := canonJSON(t, name, out)
	if err != nil {
		t.Errorf("%s: canonical output %q refused: %v", name, out, err)
		return
	}
	if !bytes.Equal(again, out) {
		t.Errorf("%s: not a fixed point:\n first %q\nsecond %q", name, out, again)
	}
	if !json.Valid(out) {
		t.Errorf("%s: canonical output %q is not valid for encoding/json", name, out)
	}
}

// TestSuiteUTF16ViaCharset feeds the suite's UTF-16 cases through
// Canonicalize with the matching charset: then they are ordinary strings.
func TestSuiteUTF16ViaCharset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, charset, want string
	}{
		{"i_string_UTF-16LE_with_BOM.json", "utf-16", `["é"]`},
		{"i_string_UTF-16LE_with_BOM.json", "utf-16le", `["é"]`},
		{"i_string_utf16LE_no_BOM.json", "utf-16le", `["é"]`},
		{"i_string_utf16BE_no_BOM.json", "utf-16be", `["é"]`},
		{"i_string_utf16BE_no_BOM.json", "utf-16", `["é"]`}, // no BOM: big-endian (RFC 2781)
	}
	for _, tt := range tests {
		body, err := os.ReadFile(filepath.Join(suiteDir, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Canonicalize("application/json; charset="+tt.charset, body, Options{})
		if err != nil {
			t.Errorf("%s as %s: %v", tt.file, tt.charset, err)
			continue
		}
		if string(res.Payload) != tt.want || res.MediaType != "application/json" {
			t.Errorf("%s as %s: %q %q, want %q application/json", tt.file, tt.charset, res.MediaType, res.Payload, tt.want)
		}
	}
}
