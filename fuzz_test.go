package idem_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// refKey is a reference model of the Idempotency-Key grammar, written from
// the contract (SPEC C3, RFC 8941 section 3.3.3) rather than from key.go:
// the field value, without OWS around it, is either an sf-string with only
// \" and \\ escapes and nothing but OWS after it, or a bare token of
// visible ASCII without '"', ',', ';' and '\'. A top-level comma (a list)
// is KEY_MULTIPLE. The key is then 1 to 128 visible ASCII characters.
// It returns the key's characters or the refusal code; refusals are
// reported for the first offending byte, scanning left to right.
func refKey(field string) (string, idem.Code) {
	s := strings.Trim(field, " \t")
	if s == "" {
		return "", idem.CodeKeyInvalid
	}
	var v []byte
	if s[0] != '"' {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == ',' {
				return "", idem.CodeKeyMultiple
			}
			if c < 0x21 || c > 0x7E || c == '"' || c == ';' || c == '\\' {
				return "", idem.CodeKeyInvalid
			}
		}
		v = []byte(s)
	} else {
		closed := false
		i := 1
		for ; i < len(s) && !closed; i++ {
			switch c := s[i]; {
			case c == '\\':
				if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
					return "", idem.CodeKeyInvalid
				}
				i++
				v = append(v, s[i])
			case c == '"':
				closed = true
			case c < 0x20 || c > 0x7E:
				return "", idem.CodeKeyInvalid
			default:
				v = append(v, c)
			}
		}
		if !closed {
			return "", idem.CodeKeyInvalid
		}
		rest := strings.TrimLeft(s[i:], " \t")
		if rest != "" {
			if rest[0] == ',' {
				return "", idem.CodeKeyMultiple
			}
			return "", idem.CodeKeyInvalid
		}
	}
	if len(v) < 1 || len(v) > 128 {
		return "", idem.CodeKeyInvalid
	}
	for _, c := range v {
		if c < 0x21 || c > 0x7E {
			return "", idem.CodeKeyInvalid
		}
	}
	return string(v), ""
}

// sfString serialises v as an RFC 8941 sf-string.
func sfString(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

var fuzzKeySeeds = []string{
	"",
	"abc",
	"abc-123_XYZ",
	`"abc"`,
	`"a\"b"`,
	`"a\\b"`,
	`"a\nb"`,
	`"abc`,
	`"abc";x=1`,
	`""`,
	"a, b",
	`"a", "b"`,
	" \tabc\t ",
	"ab c",
	"clé",
	"0f8fad5b-d9cb-469f-a165-70867728950e",
	"alice@example.com",
	strings.Repeat("k", 128),
	strings.Repeat("k", 129),
	`"` + strings.Repeat(`\\`, 128) + `"`,
	"!#$%&'()*+-./:<=>?@[]^_`{|}~",
	"\"abc\" ,",
	"\x00",
	"\"\x7f\"",
	"4111111111111111",
	"acct-0012345678901",
	"01ARZ3NDEKTSV4RRFFQ69G5FAV",
	"q83vEjRWeJq83vEjRWeJ-_",
	"ABCDEFGHIJKLMNOP",
	"aaaaaaaaaaaaaaaaaaaa",
}

// Proves threat:weak-keys (docs/threat-model.md).
func FuzzParseKey(f *testing.F) {
	for _, s := range fuzzKeySeeds {
		f.Add(s)
	}
	id := idem.Identity{Tenant: "t", Principal: "p"}
	scope := func(k idem.Key) idem.ScopeHash { return idem.ScopeOf(id, "op", "v1", k) }
	f.Fuzz(func(t *testing.T, s string) {
		k, err := idem.ParseKey([]string{s}, idem.KeyPolicy{})
		want, wantCode := refKey(s)
		if got := idem.CodeOf(err); got != wantCode {
			t.Fatalf("ParseKey(%q): code %q (err %v), reference model says %q", s, got, err, wantCode)
		}
		if err != nil {
			if _, ok := err.(*idem.Error); !ok {
				t.Fatalf("ParseKey(%q): error %T, want *idem.Error", s, err)
			}
			return
		}

		// Redaction: no printed form shows the input.
		if len(s) >= 8 {
			for _, out := range []string{k.String(), fmt.Sprint(k), fmt.Sprintf("%+v", k), fmt.Sprintf("%#v", k)} {
				if strings.Contains(out, s) {
					t.Fatalf("printed key %q contains the input %q", out, s)
				}
			}
		}

		// The key is 1 to 128 visible ASCII characters ...
		if len(want) < 1 || len(want) > idem.MaxKeyLength {
			t.Fatalf("ParseKey(%q) accepted a key of %d characters", s, len(want))
		}
		for i := 0; i < len(want); i++ {
			if want[i] < 0x21 || want[i] > 0x7E {
				t.Fatalf("ParseKey(%q) accepted byte %#x", s, want[i])
			}
		}
		// ... and the key ParseKey returned is exactly those characters:
		// its sf-string form, and its bare form where one exists, parse
		// to the same key.
		sk := scope(k)
		k2, err := idem.ParseKey([]string{sfString(want)}, idem.KeyPolicy{})
		if err != nil {
			t.Fatalf("ParseKey(%q) accepted, but its sf-string form %q is refused: %v", s, sfString(want), err)
		}
		if scope(k2) != sk {
			t.Fatalf("ParseKey(%q) and ParseKey(%q) give different keys", s, sfString(want))
		}
		if !strings.ContainsAny(want, "\",;\\") {
			k3, err := idem.ParseKey([]string{want}, idem.KeyPolicy{})
			if err != nil {
				t.Fatalf("bare form %q of accepted %q is refused: %v", want, s, err)
			}
			if scope(k3) != sk {
				t.Fatalf("ParseKey(%q) and bare ParseKey(%q) give different keys", s, want)
			}
		}
		if k.String() != fmt.Sprintf("Key(%d chars)", len(want)) {
			t.Fatalf("ParseKey(%q).String() = %q, want the length of %d characters", s, k.String(), len(want))
		}
		checkStrict(t, s, want)
	})
}

// standaloneNumber matches 13 or more digits with no letter or digit on
// either side: the reference of StrictKeyPolicy's number rule.
var standaloneNumber = regexp.MustCompile(`(^|[^A-Za-z0-9])[0-9]{13,}($|[^A-Za-z0-9])`)

// checkStrict: a key the baseline accepts (input s, characters want) is
// accepted by StrictKeyPolicy exactly when it meets each of its rules,
// and a refusal is KEY_INVALID with a reason that does not repeat the key.
func checkStrict(t *testing.T, s, want string) {
	_, err := idem.ParseKey([]string{s}, idem.StrictKeyPolicy)
	ok := len(want) >= 16 && strings.Trim(want, idem.KeyCharsetOpaque) == "" &&
		!standaloneNumber.MatchString(want) && idem.EstimateKeyEntropy(want) >= 64
	if (err == nil) != ok {
		t.Fatalf("StrictKeyPolicy on %q: err %v, want accepted %v (estimate %.1f bits)", s, err, ok, idem.EstimateKeyEntropy(want))
	}
	if err != nil && (idem.CodeOf(err) != idem.CodeKeyInvalid || (len(want) >= 8 && strings.Contains(err.Error(), want))) {
		t.Fatalf("StrictKeyPolicy on %q: %v, want KEY_INVALID without the key", s, err)
	}
}

// jsonEscapeAll writes s as a JSON string in which every character is a
// \u escape (UTF-16 surrogate pairs above the BMP): the most different
// spelling of the same string.
func jsonEscapeAll(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func jsonString(t *testing.T, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func FuzzFingerprintOrder(f *testing.F) {
	f.Add("12.50", "EUR")
	f.Add("", "")
	f.Add("a", "a")
	f.Add(`quote " and \ backslash`, "tab\tnewline\n")
	f.Add("<html>&", "\u2028\u2029")
	f.Add("é😀", "\x00\x1f\x7f")
	f.Add("\xff", "\xed\xa0\x80") // invalid UTF-8 (here a lone surrogate) is replaced before use
	u := &url.URL{Path: "/v1/payments"}
	h := http.Header{"Content-Type": {"application/json"}}
	fp := func(t *testing.T, body string) idem.Fingerprint {
		t.Helper()
		fpr, _, err := idem.Binding{}.Fingerprint("POST", u, h, []byte(body))
		if err != nil {
			t.Fatalf("Fingerprint(%q): %v", body, err)
		}
		return fpr
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		a = strings.ToValidUTF8(a, "\uFFFD")
		b = strings.ToValidUTF8(b, "\uFFFD")
		ja, jb := jsonString(t, a), jsonString(t, b)
		base := fp(t, `{"a":`+ja+`,"b":`+jb+`}`)
		for _, other := range []string{
			`{"b":` + jb + `,"a":` + ja + `}`,
			" {\n\t\"b\" : " + jb + " ,\r\n  \"a\"\t:" + ja + " } \n",
			`{"a":` + jsonEscapeAll(a) + `,"b":` + jsonEscapeAll(b) + `}`,
			`{"b":` + jsonEscapeAll(b) + `, "a":` + ja + `}`,
		} {
			if got := fp(t, other); got != base {
				t.Fatalf("same members, different fingerprint:\n %s\n %s", `{"a":`+ja+`,"b":`+jb+`}`, other)
			}
		}

		// Change one character of one value: the fingerprint must change.
		changeFirst := func(s string) string {
			r, size := utf8.DecodeRuneInString(s)
			if size == 0 {
				return "x"
			}
			if r == 'x' {
				return "y" + s[size:]
			}
			return "x" + s[size:]
		}
		a2 := changeFirst(a)
		if got := fp(t, `{"b":`+jb+`,"a":`+jsonString(t, a2)+`}`); got == base {
			t.Fatalf("value a %q changed to %q, fingerprint unchanged", a, a2)
		}
		b2 := changeFirst(b)
		if got := fp(t, `{"a":`+ja+`,"b":`+jsonString(t, b2)+`}`); got == base {
			t.Fatalf("value b %q changed to %q, fingerprint unchanged", b, b2)
		}
		// Swapping the values between the members changes it too, unless
		// they are equal.
		if a != b {
			if got := fp(t, `{"a":`+jb+`,"b":`+ja+`}`); got == base {
				t.Fatalf("values %q and %q swapped, fingerprint unchanged", a, b)
			}
		}
	})
}
