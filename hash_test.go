package idem

import (
	"crypto/sha256"
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
