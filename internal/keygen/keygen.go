// Package keygen makes Idempotency-Key values that idem.StrictKeyPolicy
// accepts for the harness and the tests, which need keys they can compute
// again (the same label, the same key) rather than fresh random ones
// (idem.NewKey).
package keygen

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// Derive returns a key idem.StrictKeyPolicy accepts, derived from label:
// 22 base64url characters of SHA-256 over label (and a counter, raised in
// the rare case the policy's heuristics refuse a digest). The same label
// always gives the same key, different labels different keys. A derived
// key is as guessable as its label: it is for tests and load generators,
// not for clients, which send random keys.
func Derive(label string) string {
	for i := 0; ; i++ {
		sum := sha256.Sum256([]byte("idem keygen " + strconv.Itoa(i) + " " + label))
		k := base64.RawURLEncoding.EncodeToString(sum[:16])
		if Strict(k) {
			return k
		}
	}
}

// ForLabel returns the key a test means by label: label itself when
// idem.StrictKeyPolicy accepts it, what follows "raw:" as it is (a key a
// test sends to be refused), a quoted label ("\"k1\"", the structured-field
// form) with its inside mapped, and Derive(label) otherwise. It maps a key
// it returned to itself.
func ForLabel(label string) string {
	if raw, ok := strings.CutPrefix(label, "raw:"); ok {
		return raw
	}
	if len(label) >= 2 && label[0] == '"' && label[len(label)-1] == '"' {
		return `"` + ForLabel(label[1:len(label)-1]) + `"`
	}
	if Strict(label) {
		return label
	}
	return Derive(label)
}

// Strict reports whether idem.StrictKeyPolicy accepts key.
func Strict(key string) bool {
	_, err := idem.ParseKey([]string{key}, idem.StrictKeyPolicy)
	return err == nil
}
