package secretfile_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/secretfile"
)

// TestCheckToken: random tokens of 128 bits pass (hex, base64url,
// rand.Text, with a prefix); short ones, short hex, and low-variety ones
// (one character, few characters, a repeated pattern, a run) are
// refused, and the error never holds the token.
// threat:console-token-weak
func TestCheckToken(t *testing.T) {
	t.Parallel()
	for range 200 {
		b := make([]byte, 16)
		rand.Read(b)
		for _, tok := range []string{hex.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b), rand.Text(), "op-" + rand.Text()} {
			if err := secretfile.CheckToken(tok); err != nil {
				t.Errorf("random token %q refused: %v", tok, err)
			}
		}
	}
	for name, tok := range map[string]string{
		"one character":  "Q",
		"21 characters":  "Zr4kW9pQ2mX7vT1nB8yL5",
		"31 hex digits":  "3f6c9b2e7a1d40c58e9f6b3a2d1c7e0",
		"white space":    "Zr4kW9pQ2mX7vT1n B8yL5cHd3s",
		"non-ASCII":      "Zr4kW9pQ2mX7vT1nB8yL5cHd3sé",
		"one repeated":   strings.Repeat("a", 40),
		"few characters": "abababcabcabcdabcdeabcdefabcdefg",
		"a pattern":      "0123456789abcdef0123456789abcdef",
		"a pattern cut":  "Zr4kW9pQZr4kW9pQZr4kW9pQZr4",
		"a run":          "abcdefghijklmnopqrstuvwxyz",
		"mostly one":     "aaaaaaaaaaaaaaaaaaaaZr4kW9pQ2m",
	} {
		err := secretfile.CheckToken(tok)
		if err == nil {
			t.Errorf("%s: %q accepted", name, tok)
		} else if strings.Contains(err.Error(), tok) {
			t.Errorf("%s: the error %q holds the token", name, err)
		}
	}
}
