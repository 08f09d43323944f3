package idem_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// keyScopeID is the fixed identity, operation and API revision under which
// these tests compare keys: two keys are the same key exactly when their
// scope hashes under this fixed context are equal.
var keyScopeID = idem.Identity{Tenant: "t1", Principal: "p1"}

// keyScope parses lines under p and returns the scope hash of the key, or
// fails the test.
func keyScope(t *testing.T, p idem.KeyPolicy, lines ...string) idem.ScopeHash {
	t.Helper()
	k, err := idem.ParseKey(lines, p)
	if err != nil {
		t.Fatalf("ParseKey(%q): unexpected error %v", lines, err)
	}
	return idem.ScopeOf(keyScopeID, "payments.create", "v1", k)
}

// checkKeyResult checks that err is nil when want is "", and otherwise an
// *idem.Error with code want (seen both through idem.CodeOf and errors.As)
// and the contract's 400 status.
func checkKeyResult(t *testing.T, input any, err error, want idem.Code) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("ParseKey(%q) = %v, want success", input, err)
		}
		return
	}
	if err == nil {
		t.Errorf("ParseKey(%q) succeeded, want %s", input, want)
		return
	}
	if got := idem.CodeOf(err); got != want {
		t.Errorf("ParseKey(%q): CodeOf = %q, want %q (err %v)", input, got, want, err)
	}
	var ie *idem.Error
	if !errors.As(err, &ie) {
		t.Errorf("ParseKey(%q): error %T is not an *idem.Error", input, err)
		return
	}
	if ie.Code != want {
		t.Errorf("ParseKey(%q): (*idem.Error).Code = %q, want %q", input, ie.Code, want)
	}
	if ie.Code.Status() != http.StatusBadRequest {
		t.Errorf("ParseKey(%q): status %d, want 400", input, ie.Code.Status())
	}
}

// Proves threat:header-smuggling (docs/threat-model.md).
func TestParseKeyFieldLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lines []string
		want  idem.Code
	}{
		{"nil", nil, idem.CodeKeyMissing},
		{"empty slice", []string{}, idem.CodeKeyMissing},
		{"one line", []string{"abc"}, ""},
		{"two lines", []string{"a", "b"}, idem.CodeKeyMultiple},
		{"two identical lines", []string{"abc", "abc"}, idem.CodeKeyMultiple},
		{"two lines one empty", []string{"abc", ""}, idem.CodeKeyMultiple},
		{"three lines", []string{"a", "b", "c"}, idem.CodeKeyMultiple},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := idem.ParseKey(tt.lines, idem.KeyPolicy{})
			checkKeyResult(t, tt.lines, err, tt.want)
		})
	}
}

func TestParseKeyValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  idem.Code
	}{
		// Lists.
		{"bare list", "a, b", idem.CodeKeyMultiple},
		{"bare list without space", "a,b", idem.CodeKeyMultiple},
		{"bare trailing comma", "abc,", idem.CodeKeyMultiple},
		{"bare leading comma", ",abc", idem.CodeKeyMultiple},
		{"sf list", `"a", "b"`, idem.CodeKeyMultiple},
		{"sf list without space", `"a","b"`, idem.CodeKeyMultiple},
		{"sf list with OWS before comma", "\"a\" \t, \"b\"", idem.CodeKeyMultiple},

		// Bare tokens.
		{"bare token", "abc-123_XYZ", ""},
		{"bare single char", "x", ""},
		{"bare uuid", "0f8fad5b-d9cb-469f-a165-70867728950e", ""},
		{"bare visible punctuation", "!#$%&'()*+-./:<=>?@[]^_`{|}~", ""},
		{"bare with quote", `ab"c`, idem.CodeKeyInvalid},
		{"bare with semicolon", "abc;x=1", idem.CodeKeyInvalid},
		{"bare with backslash", `ab\c`, idem.CodeKeyInvalid},
		{"bare space inside", "ab c", idem.CodeKeyInvalid},
		{"bare tab inside", "ab\tc", idem.CodeKeyInvalid},
		{"bare NUL", "ab\x00c", idem.CodeKeyInvalid},
		{"bare ESC", "ab\x1bc", idem.CodeKeyInvalid},
		{"bare DEL", "ab\x7fc", idem.CodeKeyInvalid},
		{"bare CR LF", "abc\r\n", idem.CodeKeyInvalid},
		{"bare non-ASCII", "clé", idem.CodeKeyInvalid},
		{"bare high byte", "ab\xffc", idem.CodeKeyInvalid},

		// Structured-field strings.
		{"sf string", `"abc"`, ""},
		{"sf escaped quote", `"a\"b"`, ""},
		{"sf escaped backslash", `"a\\b"`, ""},
		{"sf only escapes", `"\\\""`, ""},
		{"sf punctuation that bare forbids", `"a,b;c"`, ""},
		{"sf invalid escape n", `"a\nb"`, idem.CodeKeyInvalid},
		{"sf invalid escape u", `"a\u0041"`, idem.CodeKeyInvalid},
		{"sf escape at end", `"abc\`, idem.CodeKeyInvalid},
		{"sf escaped closing quote only", `"abc\"`, idem.CodeKeyInvalid},
		{"sf unterminated", `"abc`, idem.CodeKeyInvalid},
		{"sf lone quote", `"`, idem.CodeKeyInvalid},
		{"sf parameters", `"abc";x=1`, idem.CodeKeyInvalid},
		{"sf boolean parameter", `"abc";x`, idem.CodeKeyInvalid},
		{"sf junk after", `"abc"def`, idem.CodeKeyInvalid},
		{"sf junk after OWS", `"abc" def`, idem.CodeKeyInvalid},
		{"sf empty", `""`, idem.CodeKeyInvalid},
		{"sf space inside", `"ab c"`, idem.CodeKeyInvalid},
		{"sf only space", `" "`, idem.CodeKeyInvalid},
		{"sf tab inside", "\"ab\tc\"", idem.CodeKeyInvalid},
		{"sf control char", "\"ab\x01c\"", idem.CodeKeyInvalid},
		{"sf DEL", "\"ab\x7fc\"", idem.CodeKeyInvalid},
		{"sf non-ASCII", `"clé"`, idem.CodeKeyInvalid},

		// Empty and whitespace.
		{"empty", "", idem.CodeKeyInvalid},
		{"only spaces", "   ", idem.CodeKeyInvalid},
		{"only OWS", " \t \t", idem.CodeKeyInvalid},

		// OWS around the value is tolerated.
		{"leading and trailing OWS", " \tabc\t ", ""},
		{"OWS around sf string", " \t\"abc\" \t", ""},

		// Length: 1 to 128 characters of the key, not of the field value.
		{"128 bare", strings.Repeat("k", 128), ""},
		{"129 bare", strings.Repeat("k", 129), idem.CodeKeyInvalid},
		{"128 sf", `"` + strings.Repeat("k", 128) + `"`, ""},
		{"129 sf", `"` + strings.Repeat("k", 129) + `"`, idem.CodeKeyInvalid},
		{"128 escaped backslashes", `"` + strings.Repeat(`\\`, 128) + `"`, ""},
		{"129 escaped backslashes", `"` + strings.Repeat(`\\`, 129) + `"`, idem.CodeKeyInvalid},
		{"128 with OWS", "  " + strings.Repeat("k", 128) + "\t", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := idem.ParseKey([]string{tt.value}, idem.KeyPolicy{})
			checkKeyResult(t, tt.value, err, tt.want)
		})
	}
}

// TestParseKeyForms checks that the bare and sf-string forms of the same
// characters, and values with OWS around them, are the same key, and that
// different characters are different keys.
func TestParseKeyForms(t *testing.T) {
	t.Parallel()
	p := idem.KeyPolicy{}
	same := [][]string{
		{"abc", `"abc"`, " abc", "abc\t", " \t\"abc\"\t "},
		{"abc-123_XYZ", `"abc-123_XYZ"`},
		{"a!b", `"a!b"`},
		{strings.Repeat("k", 128), `"` + strings.Repeat("k", 128) + `"`},
	}
	for _, group := range same {
		want := keyScope(t, p, group[0])
		for _, v := range group[1:] {
			if got := keyScope(t, p, v); got != want {
				t.Errorf("ParseKey(%q) and ParseKey(%q) give different keys", group[0], v)
			}
		}
	}

	distinct := []string{
		"abc", "ABC", "abcd", "ab", `"a\"b"`, `"a\\b"`, `"a\\\"b"`,
		"a", "b", "aB", `"a,b"`, `"a;b"`, "a-b", "a_b",
	}
	seen := map[idem.ScopeHash]string{}
	for _, v := range distinct {
		s := keyScope(t, p, v)
		if prev, ok := seen[s]; ok {
			t.Errorf("ParseKey(%q) and ParseKey(%q) give the same key", prev, v)
		}
		seen[s] = v
	}
}

func TestParseKeyPolicy(t *testing.T) {
	t.Parallel()
	uuid := "0f8fad5b-d9cb-469f-a165-70867728950e"
	tests := []struct {
		name   string
		policy idem.KeyPolicy
		value  string
		want   idem.Code
	}{
		{"zero policy accepts 1 char", idem.KeyPolicy{}, "a", ""},
		{"MinLength 0 means 1", idem.KeyPolicy{MinLength: 0}, "a", ""},
		{"MinLength 16 refuses 15", idem.KeyPolicy{MinLength: 16}, strings.Repeat("a", 15), idem.CodeKeyInvalid},
		{"MinLength 16 accepts 16", idem.KeyPolicy{MinLength: 16}, strings.Repeat("a", 16), ""},
		{"MinLength counts key chars not quotes", idem.KeyPolicy{MinLength: 16}, `"` + strings.Repeat("a", 15) + `"`, idem.CodeKeyInvalid},
		{"MaxLength 32 accepts 32", idem.KeyPolicy{MaxLength: 32}, strings.Repeat("a", 32), ""},
		{"MaxLength 32 refuses 33", idem.KeyPolicy{MaxLength: 32}, strings.Repeat("a", 33), idem.CodeKeyInvalid},
		{"MaxLength counts key chars not quotes", idem.KeyPolicy{MaxLength: 32}, `"` + strings.Repeat("a", 32) + `"`, ""},
		{"MaxLength above 128 is 128: accepts 128", idem.KeyPolicy{MaxLength: 200}, strings.Repeat("a", 128), ""},
		{"MaxLength above 128 is 128: refuses 129", idem.KeyPolicy{MaxLength: 200}, strings.Repeat("a", 129), idem.CodeKeyInvalid},
		{"negative MaxLength is 128", idem.KeyPolicy{MaxLength: -1}, strings.Repeat("a", 128), ""},
		{"negative MaxLength refuses 129", idem.KeyPolicy{MaxLength: -1}, strings.Repeat("a", 129), idem.CodeKeyInvalid},

		{"opaque charset refuses dot", idem.KeyPolicy{Charset: idem.KeyCharsetOpaque}, "a.b", idem.CodeKeyInvalid},
		{"opaque charset refuses at", idem.KeyPolicy{Charset: idem.KeyCharsetOpaque}, "a@b", idem.CodeKeyInvalid},
		{"opaque charset refuses plus", idem.KeyPolicy{Charset: idem.KeyCharsetOpaque}, "a+b", idem.CodeKeyInvalid},
		{"opaque charset accepts its alphabet", idem.KeyPolicy{Charset: idem.KeyCharsetOpaque}, idem.KeyCharsetOpaque, ""},
		{"opaque charset applies to sf form", idem.KeyPolicy{Charset: idem.KeyCharsetOpaque}, `"a.b"`, idem.CodeKeyInvalid},
		{"custom charset accepts", idem.KeyPolicy{Charset: "abc"}, "cabbac", ""},
		{"custom charset refuses", idem.KeyPolicy{Charset: "abc"}, "abcd", idem.CodeKeyInvalid},
		{"charset cannot admit space", idem.KeyPolicy{Charset: "a "}, `"a a"`, idem.CodeKeyInvalid},

		{"email-like refused", idem.KeyPolicy{RejectEmailLike: true}, "alice@example.com", idem.CodeKeyInvalid},
		{"email-like sf form refused", idem.KeyPolicy{RejectEmailLike: true}, `"alice@example.com"`, idem.CodeKeyInvalid},
		{"email-like subdomain refused", idem.KeyPolicy{RejectEmailLike: true}, "a@mail.example.co.uk", idem.CodeKeyInvalid},
		{"email-like two ats refused", idem.KeyPolicy{RejectEmailLike: true}, "x@y@example.com", idem.CodeKeyInvalid},
		{"email-like shortest refused", idem.KeyPolicy{RejectEmailLike: true}, "a@b.c", idem.CodeKeyInvalid},
		{"no dot in domain accepted", idem.KeyPolicy{RejectEmailLike: true}, "a@b", ""},
		{"empty local part accepted", idem.KeyPolicy{RejectEmailLike: true}, "@foo.com", ""},
		{"dot at end of domain accepted", idem.KeyPolicy{RejectEmailLike: true}, "alice@example.", ""},
		{"dot at start of domain accepted", idem.KeyPolicy{RejectEmailLike: true}, "alice@.com", ""},
		{"dot only before at accepted", idem.KeyPolicy{RejectEmailLike: true}, "a.b@c", ""},
		{"email-like accepted without the rule", idem.KeyPolicy{}, "alice@example.com", ""},

		{"strict accepts uuid", idem.StrictKeyPolicy, uuid, ""},
		{"strict accepts sf uuid", idem.StrictKeyPolicy, `"` + uuid + `"`, ""},
		{"strict accepts ulid", idem.StrictKeyPolicy, "01ARZ3NDEKTSV4RRFFQ69G5FAV", ""},
		{"strict accepts base64url", idem.StrictKeyPolicy, "q83vEjRWeJq83vEjRWeJ-_", ""},
		{"strict accepts 16 distinct", idem.StrictKeyPolicy, "ABCDEFGHIJKLMNOP", ""},
		{"strict refuses 15", idem.StrictKeyPolicy, "ABCDEFGHIJKLMNO", idem.CodeKeyInvalid},
		{"strict refuses short", idem.StrictKeyPolicy, "short", idem.CodeKeyInvalid},
		{"strict refuses braced uuid", idem.StrictKeyPolicy, "{" + uuid + "}", idem.CodeKeyInvalid},
		{"strict refuses email", idem.StrictKeyPolicy, "alice.smith@example.com", idem.CodeKeyInvalid},
		{"strict refuses 129", idem.StrictKeyPolicy, strings.Repeat("A", 129), idem.CodeKeyInvalid},
		{"strict still reports lists", idem.StrictKeyPolicy, uuid + ", " + uuid, idem.CodeKeyMultiple},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := idem.ParseKey([]string{tt.value}, tt.policy)
			checkKeyResult(t, tt.value, err, tt.want)
		})
	}
}

func TestStrictKeyPolicyValue(t *testing.T) {
	t.Parallel()
	want := idem.KeyPolicy{MinLength: 16, Charset: idem.KeyCharsetOpaque, RejectEmailLike: true,
		RejectNumberLike: true, MinEntropyBits: 64}
	if idem.StrictKeyPolicy != want {
		t.Errorf("StrictKeyPolicy = %+v, want %+v", idem.StrictKeyPolicy, want)
	}
	if idem.MaxKeyLength != 128 {
		t.Errorf("MaxKeyLength = %d, want 128", idem.MaxKeyLength)
	}
	if idem.KeyHeader != "Idempotency-Key" {
		t.Errorf("KeyHeader = %q", idem.KeyHeader)
	}
}

// TestParseKeyFromHeader reads the key the way middleware does, through
// http.Header.Values, so header name case does not matter.
func TestParseKeyFromHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Add("idempotency-key", `"abc"`)
	want := keyScope(t, idem.KeyPolicy{}, "abc")
	if got := keyScope(t, idem.KeyPolicy{}, h.Values(idem.KeyHeader)...); got != want {
		t.Error("key read from the header differs from the bare key")
	}
	h.Add("Idempotency-Key", "def")
	_, err := idem.ParseKey(h.Values(idem.KeyHeader), idem.KeyPolicy{})
	checkKeyResult(t, h.Values(idem.KeyHeader), err, idem.CodeKeyMultiple)
}

// TestKeyRedacted checks that no way of printing or encoding a Key shows
// the key text.
// Proves threat:secrets-in-logs (docs/threat-model.md).
func TestKeyRedacted(t *testing.T) {
	t.Parallel()
	const secret = "Zq7SecretKeyMaterial-9x"
	k, err := idem.ParseKey([]string{secret}, idem.KeyPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	type exported struct {
		K idem.Key
	}
	type withPointer struct {
		K *idem.Key
	}
	js, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"String()":           k.String(),
		"Sprint":             fmt.Sprint(k),
		"Sprintln":           fmt.Sprintln(k),
		"%v":                 fmt.Sprintf("%v", k),
		"%+v":                fmt.Sprintf("%+v", k),
		"%#v":                fmt.Sprintf("%#v", k),
		"%s":                 fmt.Sprintf("%s", k),
		"%q":                 fmt.Sprintf("%q", k),
		"%x":                 fmt.Sprintf("%x", k),
		"%X":                 fmt.Sprintf("%X", k),
		"%v pointer":         fmt.Sprintf("%v", &k),
		"%+v pointer":        fmt.Sprintf("%+v", &k),
		"%v in struct":       fmt.Sprintf("%v", exported{k}),
		"%+v in struct":      fmt.Sprintf("%+v", exported{k}),
		"%#v in struct":      fmt.Sprintf("%#v", exported{k}),
		"%+v in ptr struct":  fmt.Sprintf("%+v", withPointer{&k}),
		"%v in slice":        fmt.Sprintf("%v", []idem.Key{k}),
		"%#v in slice":       fmt.Sprintf("%#v", []idem.Key{k}),
		"%v in map":          fmt.Sprintf("%v", map[string]idem.Key{"k": k}),
		"%v as error detail": fmt.Errorf("refused %v", k).Error(),
		"json":               string(js),
	}
	// Verbs that do not suit a string must not print the fields either
	// (fmt's bad-verb output otherwise shows them, e.g. %!d(string=...)).
	// They are built at run time to keep go vet's printf check quiet.
	// (%p is left out: fmt prints its bad-verb report without consulting
	// any method, so no method of Key can redact it.)
	for _, verb := range []string{"%d", "%t", "%e", "%c", "%U", "%o", "%b", "%10.3v", "%-20s"} {
		outputs[verb] = fmt.Sprintf(verb, k)
	}
	lowerHex := hex.EncodeToString([]byte(secret))
	for name, out := range outputs {
		if strings.Contains(out, secret) || strings.Contains(strings.ToLower(out), lowerHex) || strings.Contains(out, "SecretKey") {
			t.Errorf("%s reveals the key: %q", name, out)
		}
	}
	if want := "Key(23 chars)"; k.String() != want {
		t.Errorf("String() = %q, want %q", k.String(), want)
	}
}

func TestZeroKeyString(t *testing.T) {
	t.Parallel()
	var k idem.Key
	if got := k.String(); got != "Key(0 chars)" {
		t.Errorf("zero Key String() = %q", got)
	}
}

// TestQuoteKey: an ID of visible ASCII, quotes and backslashes
// included, becomes a key ParseKey reads, the same key for the same ID
// and another for another ID; other bytes are refused KEY_INVALID.
func TestQuoteKey(t *testing.T) {
	policy := idem.KeyPolicy{MinLength: 1}
	a, err := idem.ParseKey([]string{idem.QuoteKey(`msg"7"\x`)}, policy)
	if err != nil {
		t.Fatalf("ParseKey(QuoteKey(…)): %v", err)
	}
	again, _ := idem.ParseKey([]string{idem.QuoteKey(`msg"7"\x`)}, policy)
	other, _ := idem.ParseKey([]string{idem.QuoteKey(`msg"7"\y`)}, policy)
	id := idem.Identity{Principal: "p"}
	if idem.ScopeOf(id, "op", "v1", a) != idem.ScopeOf(id, "op", "v1", again) || idem.ScopeOf(id, "op", "v1", a) == idem.ScopeOf(id, "op", "v1", other) {
		t.Error("QuoteKey does not give one key per ID")
	}
	if _, err := idem.ParseKey([]string{idem.QuoteKey("naïve")}, policy); idem.CodeOf(err) != idem.CodeKeyInvalid {
		t.Errorf("a non-ASCII ID: %v, want KEY_INVALID", err)
	}
}
