package check

import (
	"crypto/rand"
	"encoding/hex"
	"math/big"
	"strings"
)

// Placeholders of Config.Body.
const (
	placeUnique  = "{{unique}}"
	placeVariant = "{{variant}}"
)

// render fills the body template: every {{unique}} becomes unique and
// every {{variant}} variant.
func render(tmpl, unique, variant string) string {
	return strings.NewReplacer(placeUnique, unique, placeVariant, variant).Replace(tmpl)
}

// newKey returns a random version 4 UUID (RFC 9562), the key form every
// API accepts. Written by hand: eight lines do not justify a dependency.
func newKey() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// uniqueMin and uniqueSpan make {{unique}} values 15-digit decimal numbers
// without a leading zero: valid inside a JSON string and as a JSON number.
var (
	uniqueMin  = big.NewInt(100_000_000_000_000)
	uniqueSpan = big.NewInt(900_000_000_000_000)
)

// newUnique returns a fresh value for {{unique}}.
func newUnique() string {
	n, _ := rand.Int(rand.Reader, uniqueSpan) // never fails (crypto/rand)
	return n.Add(n, uniqueMin).String()
}
