package idem

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"math"
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
//
// Its content and entropy checks are heuristics on the one value a server
// sees: they refuse keys that are plainly not random or plainly carry
// business data, and cannot prove that a key is random — a counter
// hashed by the client passes. They exist to stop the common mistakes
// (order numbers, e-mail addresses, card numbers, "test" keys) that make
// keys guessable or leak data into logs and the registry's neighbours.
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
	// RejectNumberLike refuses keys that hold a number standing alone of
	// NumberLikeDigits (13) or more decimal digits: the whole key, or a
	// part of it between characters that are neither letters nor digits
	// ("4111111111111111", "acct-0012345678901"). Card numbers have 13 to
	// 19 digits; account and customer numbers are often as long. 13 is
	// the shortest run that never refuses a UUID (whose longest group has
	// 12 hex digits); shorter numbers are left to MinEntropyBits, which
	// refuses a key made mostly of one.
	RejectNumberLike bool
	// MinEntropyBits, when positive, refuses keys whose estimated entropy
	// (EstimateKeyEntropy) is below it; 0 means no estimate is made.
	MinEntropyBits int
}

// NumberLikeDigits is the length from which KeyPolicy.RejectNumberLike
// refuses a number standing alone in a key.
const NumberLikeDigits = 13

// StrictKeyPolicy asks for opaque, high-entropy keys: 16 to 128 characters
// of KeyCharsetOpaque, nothing that looks like an e-mail address or a
// card or account number, and an estimated entropy of at least 64 bits.
// A UUIDv4 (about 134 estimated bits), a ULID (about 103) and 22 base64url
// characters from a random source (128 random bits, about 92 estimated;
// NewKey) pass with a wide margin; "order-1234567890" (62),
// "7c0d2f6e-pay-0001" (about 60), sixteen random hex digits (64 random
// bits, about 51 estimated: the estimate is low for short keys) and any
// repetition fail.
var StrictKeyPolicy = KeyPolicy{MinLength: 16, Charset: KeyCharsetOpaque, RejectEmailLike: true,
	RejectNumberLike: true, MinEntropyBits: 64}

// EstimateKeyEntropy estimates the entropy of a key in bits as its length
// times the Shannon entropy of its own character frequencies:
// -len(v) × Σ p(c)·log2 p(c) over the distinct characters c of v, with
// p(c) their share of v. A key of one repeated character scores 0, n
// distinct characters score n·log2(n), and a random key scores a little
// below the entropy of its source (the estimate cannot exceed
// len(v)·log2(len(v)), so it undercounts short keys).
//
// It is a heuristic with known limits: it sees character frequencies, not
// order, so "ABCDEFGHIJKLMNOP" scores as much as a random permutation of
// those letters (64 bits); length makes up for few distinct characters
// (80 characters alternating "ab" score 80 bits); and it cannot tell a
// random key from a hash of a counter. It refuses keys made of few
// distinct characters or dominated by repeats — counters, dates, order
// numbers, "test" keys — not every predictable key.
func EstimateKeyEntropy(v string) float64 {
	var counts [256]int
	for i := 0; i < len(v); i++ {
		counts[v[i]]++
	}
	n, h := float64(len(v)), 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h * n
}

// NewKey returns a fresh random key that StrictKeyPolicy accepts: 22
// base64url characters encoding 16 bytes (128 bits) from crypto/rand. In
// the rare case that a draw trips the policy's heuristics (a simulation of
// two million draws met none), it draws again. It is safe for concurrent
// use.
func NewKey() string {
	for {
		var b [16]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		k := base64.RawURLEncoding.EncodeToString(b[:])
		if StrictKeyPolicy.check(k) == nil {
			return k
		}
	}
}

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

// QuoteKey is id written as a structured-field string (RFC 8941), the
// form in which ParseKey reads a key of any printable ASCII: for doors
// whose key is an ID the transport chose (a webhook-id, a broker's
// message ID) rather than an Idempotency-Key header. Other bytes are
// kept, and ParseKey refuses them (KEY_INVALID).
func QuoteKey(id string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(id) + `"`
}

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
	lengthErr := func() error {
		return keyInvalid("the key must be " + strconv.Itoa(minLen) + " to " + strconv.Itoa(maxLen) + " characters long")
	}
	if len(v) > maxLen {
		return lengthErr()
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7F {
			return keyInvalid("the key may hold only visible ASCII characters")
		}
	}
	// What the key says before its length: that reason helps its sender
	// most ("bob@example.com" is too short, but mainly an address).
	if p.RejectEmailLike && looksLikeEmail(v) {
		return keyInvalid("the key looks like an e-mail address; use an opaque random value")
	}
	if p.RejectNumberLike && holdsNumber(v) {
		return keyInvalid("the key holds a number of " + strconv.Itoa(NumberLikeDigits) +
			" or more digits, like a card or account number; use an opaque random value")
	}
	if len(v) < minLen {
		return lengthErr()
	}
	if p.Charset != "" {
		for i := 0; i < len(v); i++ {
			if strings.IndexByte(p.Charset, v[i]) < 0 {
				return keyInvalid("the key holds a character outside the allowed set")
			}
		}
	}
	if p.MinEntropyBits > 0 {
		if bits := EstimateKeyEntropy(v); bits < float64(p.MinEntropyBits) {
			return keyInvalid("the key is too predictable: about " + strconv.Itoa(int(bits)) + " bits of estimated entropy, at least " +
				strconv.Itoa(p.MinEntropyBits) + " required; use a random value such as a UUIDv4 or 22 base64url characters")
		}
	}
	return nil
}

// holdsNumber reports whether v holds NumberLikeDigits or more decimal
// digits standing alone: a maximal run of letters and digits that is all
// digits.
func holdsNumber(v string) bool {
	run, digits := 0, true
	for i := 0; i <= len(v); i++ {
		if i < len(v) && isAlnum(v[i]) {
			run++
			digits = digits && v[i] >= '0' && v[i] <= '9'
			continue
		}
		if digits && run >= NumberLikeDigits {
			return true
		}
		run, digits = 0, true
	}
	return false
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
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
