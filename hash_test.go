package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"
)

// HashStrings is SHA-256 of the length-prefixed encoding, and field
// boundaries and the domain count.
func TestHashStrings(t *testing.T) {
	want := sha256.Sum256([]byte("\x00\x00\x00\x01d\x00\x00\x00\x02ab\x00\x00\x00\x01c"))
	if got := HashStrings("d", "ab", "c"); got != want {
		t.Errorf("HashStrings(d, ab, c) = %x, want %x", got, want)
	}
	for _, other := range [][32]byte{HashStrings("d", "a", "bc"), HashStrings("e", "ab", "c"), HashStrings("d", "abc"), HashStrings("d", "ab", "c", "")} {
		if other == want {
			t.Errorf("a different sequence hashes alike: %x", other)
		}
	}
}

// TestFieldHashPastBuffer: fields that outgrow the stack buffer, whichever
// field crosses it and whichever method writes it, hash exactly as the
// length-prefixed encoding does.
func TestFieldHashPastBuffer(t *testing.T) {
	for _, n := range []int{0, 1, 200, 499, 500, 503, 504, 505, 512, 600, 5000} {
		big := strings.Repeat("x", n)
		var enc []byte
		for _, s := range []string{"dom", "a", big, "b", big} {
			enc = binary.BigEndian.AppendUint32(enc, uint32(len(s)))
			enc = append(enc, s...)
		}
		want := sha256.Sum256(enc)
		g := newFieldHash("dom")
		g.string("a")
		g.string(big)
		g.bytes([]byte("b"))
		g.largeBytes([]byte(big))
		if got := g.sum(); got != want {
			t.Errorf("n=%d: %x, want %x", n, got, want)
		}
		h := newFieldHash("dom")
		h.string("a")
		h.bytes([]byte(big))
		h.string("b")
		h.string(big)
		if got := h.sum(); got != want {
			t.Errorf("n=%d (bytes, string): %x, want %x", n, got, want)
		}
	}
}

// TestHashesAllocateNothing: a scope, an identity hash, a fingerprint's
// hash and a small response's digest allocate nothing (they run on every
// request, replays included).
func TestHashesAllocateNothing(t *testing.T) {
	id := Identity{Tenant: "t", Principal: "p"}
	k, err := ParseKey([]string{"a-key-of-a-common-length-0123456789"}, KeyPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	parts := FingerprintParts{Method: "POST", Target: "/v1/payments", MediaType: "application/json", Mode: "json"}
	resp := Response{Status: 201, MediaType: "application/json", Body: []byte(`{"id":"pay_1"}`)}
	var sink byte
	if n := testing.AllocsPerRun(100, func() {
		s := ScopeOf(id, "payments.create", "v1", k)
		h := id.Hash()
		f := parts.fingerprint([32]byte{})
		d := resp.Digest()
		sink ^= s[0] ^ h[0] ^ f[0] ^ d[0]
	}); n != 0 {
		t.Errorf("%v allocations per scope, identity, fingerprint and digest, want 0", n)
	}
	_ = sink
}
