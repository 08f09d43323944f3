package idem_test

import (
	"crypto/rand"
	"encoding/base64"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/idemkit/idem"
)

// TestStrictKeyPolicyRefusesContent: the keys seed 000 forbids — short,
// shaped like an e-mail address or an order, repetitive, a card number —
// are KEY_INVALID under StrictKeyPolicy, each with the reason that names
// what is wrong.
// Proves threat:weak-keys (docs/threat-model.md).
func TestStrictKeyPolicyRefusesContent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ key, reason string }{
		{"Z", "characters long"},
		{"1", "characters long"},
		{"bob@example.com", "e-mail address"},
		{"alice.smith@example.com", "e-mail address"},
		{"order-1", "characters long"},
		{"aaaaaaaaaaaaaaaaaaaa", "too predictable"},
		{"4111111111111111", "card or account number"},
		{"1234567890123456", "card or account number"},
		{"acct-0012345678901", "card or account number"},
		{"payment-4000056655665556-retry", "card or account number"},
		{"order-1234567890", "too predictable"},
		{"7c0d2f6e-pay-0001", "too predictable"},
		{"customer-000000000042", "too predictable"},
		{"test-test-test-test", "too predictable"},
		{"2026-12-01-order-77", "too predictable"},
	} {
		_, err := idem.ParseKey([]string{c.key}, idem.StrictKeyPolicy)
		checkKeyResult(t, c.key, err, idem.CodeKeyInvalid)
		if err != nil && !strings.Contains(err.Error(), c.reason) {
			t.Errorf("ParseKey(%q): reason %q, want one that mentions %q", c.key, err, c.reason)
		}
		if err != nil && len(c.key) > 3 && strings.Contains(err.Error(), c.key) {
			t.Errorf("ParseKey(%q): the reason %q repeats the key", c.key, err)
		}
	}
}

// TestStrictKeyPolicyAcceptsRandomKeys: random keys of the usual shapes —
// UUIDv4, ULID, 22 base64url characters, NewKey — always pass (20,000
// draws of each), so a client that follows the contract is never refused.
// Proves threat:weak-keys (docs/threat-model.md).
func TestStrictKeyPolicyAcceptsRandomKeys(t *testing.T) {
	t.Parallel()
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for name, gen := range map[string]func() string{
		"uuidv4":    uuid.NewString,
		"ulid":      newULID,
		"base64url": func() string { b := make([]byte, 16); rand.Read(b); return base64.RawURLEncoding.EncodeToString(b) },
		"NewKey":    idem.NewKey,
	} {
		lowest := math.Inf(1)
		for range n {
			k := gen()
			if _, err := idem.ParseKey([]string{k}, idem.StrictKeyPolicy); err != nil {
				t.Fatalf("%s %q refused: %v", name, k, err)
			}
			lowest = min(lowest, idem.EstimateKeyEntropy(k))
		}
		t.Logf("%s: lowest estimate over %d draws %.1f bits", name, n, lowest)
	}
	if k := idem.NewKey(); len(k) != 22 || strings.Trim(k, idem.KeyCharsetOpaque) != "" || k == idem.NewKey() {
		t.Errorf("NewKey() = %q: want 22 fresh base64url characters", k)
	}
}

// newULID returns a ULID of now: 48 bits of milliseconds and 80 random
// bits in Crockford's base32.
func newULID() string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var r [10]byte
	rand.Read(r[:])
	ms := uint64(1795000000000) // 2026-11
	out := make([]byte, 26)
	for i := 9; i >= 0; i-- {
		out[i] = alphabet[ms&31]
		ms >>= 5
	}
	bits := 0
	var acc uint64
	j := 10
	for _, b := range r {
		acc, bits = acc<<8|uint64(b), bits+8
		for bits >= 5 {
			bits -= 5
			out[j] = alphabet[(acc>>bits)&31]
			j++
		}
	}
	return string(out)
}

// Proves threat:weak-keys (docs/threat-model.md).
func TestEstimateKeyEntropy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key  string
		bits float64
	}{
		{"", 0},
		{"Z", 0},
		{strings.Repeat("a", 40), 0},
		{"abab", 4},              // 2 characters, half each: 1 bit × 4
		{"ABCDEFGHIJKLMNOP", 64}, // 16 distinct: log2(16) × 16
		{"aab", 3 * (-(2.0/3)*math.Log2(2.0/3) - (1.0/3)*math.Log2(1.0/3))},
	} {
		if got := idem.EstimateKeyEntropy(c.key); math.Abs(got-c.bits) > 1e-9 {
			t.Errorf("EstimateKeyEntropy(%q) = %v, want %v", c.key, got, c.bits)
		}
	}
}

// TestKeyPolicyHeuristicsAreOptIn: the number and entropy rules apply only
// when set, and RejectNumberLike refuses a number standing alone of 13
// digits but not 12 (the longest group of a UUID), nor 13 digits next to
// a letter.
func TestKeyPolicyHeuristicsAreOptIn(t *testing.T) {
	t.Parallel()
	num := idem.KeyPolicy{RejectNumberLike: true}
	ent := idem.KeyPolicy{MinEntropyBits: 64}
	for _, c := range []struct {
		p    idem.KeyPolicy
		key  string
		want idem.Code
	}{
		{idem.KeyPolicy{}, "4111111111111111", ""},
		{idem.KeyPolicy{}, strings.Repeat("a", 20), ""},
		{num, "1234567890123", idem.CodeKeyInvalid},
		{num, "123456789012", ""},
		{num, "x_1234567890123", idem.CodeKeyInvalid},
		{num, "1234567890123.x", idem.CodeKeyInvalid},
		{num, "a1234567890123", ""},
		{num, "1234567890123f", ""},
		{num, "0f8fad5b-d9cb-469f-a165-708677289502", ""},
		{num, "0f8fad5b-d9cb-469f-a165-123456789012", ""},
		{ent, "ABCDEFGHIJKLMNOP", ""},
		{ent, "ABCDEFGHIJKLMNOA", idem.CodeKeyInvalid},
		{ent, strings.Repeat("ab", 30), idem.CodeKeyInvalid},
		// A documented limit: length makes up for few characters, so 80
		// characters alternating two letters score 80 bits and pass.
		{ent, strings.Repeat("ab", 40), ""},
	} {
		_, err := idem.ParseKey([]string{c.key}, c.p)
		checkKeyResult(t, c.key, err, c.want)
	}
}
