package idem

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// KeyHeader is the request header that carries the idempotency key.
const KeyHeader = "Idempotency-Key"

// MaxKeyLength is the longest key the contract accepts under any policy.
const MaxKeyLength = 128

// KeyCharsetOpaque is the alphabet of StrictKeyPolicy: letters, digits,
// '-' and '_' (UUIDs, ULIDs, base64url).
const KeyCharsetOpaque = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// KeyPolicy says which Idempotency-Key values an operation accepts beyond
// the contract's baseline (1 to 128 visible ASCII characters). The zero
// value is the baseline. A KeyPolicy is a plain value, safe to share.
type KeyPolicy struct {
	// MinLength is the shortest key accepted; 0 means 1.
	MinLength int
	// MaxLength is the longest key accepted; 0 or more than MaxKeyLength
	// means MaxKeyLength.
	MaxLength int
	// Charset, if not empty, lists every character a key may contain.
	Charset string
	// RejectEmailLike refuses keys that look like an e-mail address
	// (something@domain.tld): keys must be opaque, not carry content.
	RejectEmailLike bool
}

// StrictKeyPolicy asks for opaque, high-entropy keys: at least 16
// characters of KeyCharsetOpaque, nothing that looks like an e-mail address.
var StrictKeyPolicy = KeyPolicy{MinLength: 16, Charset: KeyCharsetOpaque, RejectEmailLike: true}

// Key is a parsed Idempotency-Key. It keeps the value only to hash it into
// a Scope: nothing outside this package can read it, String redacts it, and
// only hashes are ever stored. The zero Key is not valid.
type Key struct {
	v string
}

// String returns a redacted form that is safe to log.
func (k Key) String() string { return "Key(" + strconv.Itoa(len(k.v)) + " chars)" }

// Format writes the redacted form for every verb, so that no fmt verb
// (%#v, %d, ...) prints the key.
func (k Key) Format(f fmt.State, verb rune) { io.WriteString(f, k.String()) }

// ParseKey reads the Idempotency-Key field lines of a request (as returned
// by http.Header.Values) under policy p. Exactly one field line is required.
// Its value is either a structured-field string (RFC 8941 section 3.3.3,
// `"..."` with \" and \\ escapes, no parameters) or a bare token of visible
// ASCII without '"', ',', ';' or '\'. Both forms of the same characters are
// the same key. A top-level comma (a list) is reported as KEY_MULTIPLE.
// Refusals are *Error with CodeKeyMissing, CodeKeyMultiple or CodeKeyInvalid.
func ParseKey(fieldLines []string, p KeyPolicy) (Key, error) {
	switch len(fieldLines) {
	case 0:
		return Key{}, &Error{Code: CodeKeyMissing, Reason: "the Idempotency-Key header is required"}
	case 1:
	default:
		return Key{}, &Error{Code: CodeKeyMultiple, Reason: "send exactly one Idempotency-Key field line"}
	}
	v, err := keyValue(strings.Trim(fieldLines[0], " \t"))
	if err != nil {
		return Key{}, err
	}
	if err := p.check(v); err != nil {
		return Key{}, err
	}
	return Key{v: v}, nil
}

func keyInvalid(reason string) *Error { return &Error{Code: CodeKeyInvalid, Reason: reason} }

// keyValue unwraps the sf-string or bare-token form.
func keyValue(s string) (string, error) {
	if s == "" {
		return "", keyInvalid("the key is empty")
	}
	if s[0] != '"' {
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == ',':
				return "", &Error{Code: CodeKeyMultiple, Reason: "the Idempotency-Key header holds a list"}
			case c <= ' ' || c >= 0x7F || c == '"' || c == ';' || c == '\\':
				return "", keyInvalid("a bare key may hold only visible ASCII other than '\"', ',', ';' and '\\'")
			}
		}
		return s, nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 >= len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", keyInvalid("a quoted key may escape only '\"' and '\\'")
			}
			i++
			b.WriteByte(s[i])
		case c == '"':
			rest := strings.TrimLeft(s[i+1:], " \t")
			switch {
			case rest == "":
				return b.String(), nil
			case rest[0] == ',':
				return "", &Error{Code: CodeKeyMultiple, Reason: "the Idempotency-Key header holds a list"}
			default:
				return "", keyInvalid("unexpected characters after the quoted key")
			}
		case c < ' ' || c >= 0x7F:
			return "", keyInvalid("a quoted key may hold only printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", keyInvalid("unterminated quoted key")
}

func (p KeyPolicy) check(v string) error {
	minLen, maxLen := max(p.MinLength, 1), p.MaxLength
	if maxLen <= 0 || maxLen > MaxKeyLength {
		maxLen = MaxKeyLength
	}
	if len(v) < minLen || len(v) > maxLen {
		return keyInvalid("the key must be " + strconv.Itoa(minLen) + " to " + strconv.Itoa(maxLen) + " characters long")
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7F {
			return keyInvalid("the key may hold only visible ASCII characters")
		}
		if p.Charset != "" && strings.IndexByte(p.Charset, c) < 0 {
			return keyInvalid("the key holds a character outside the allowed set")
		}
	}
	if p.RejectEmailLike && looksLikeEmail(v) {
		return keyInvalid("the key looks like an e-mail address; use an opaque random value")
	}
	return nil
}

// looksLikeEmail reports whether v has the shape local@domain.tld.
func looksLikeEmail(v string) bool {
	at := strings.LastIndexByte(v, '@')
	if at <= 0 {
		return false
	}
	domain := v[at+1:]
	dot := strings.LastIndexByte(domain, '.')
	return dot > 0 && dot < len(domain)-1
}
