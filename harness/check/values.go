package check

import (
	"crypto/rand"
	"math/big"
	"strings"

	"github.com/google/uuid"
)

// Placeholders of Config.Body.
const (
	placeUnique  = "{{unique}}"
	placeVariant = "{{variant}}"
	placeLexical = "{{lexical}}"
)

// render fills the body template: every {{unique}} becomes unique,
// every {{variant}} variant and every {{lexical}} LexicalFirst.
func render(tmpl, unique, variant string) string {
	return renderLexical(tmpl, unique, variant, LexicalFirst)
}

// renderLexical is render with {{lexical}} as lexical.
func renderLexical(tmpl, unique, variant, lexical string) string {
	return strings.NewReplacer(placeUnique, unique, placeVariant, variant, placeLexical, lexical).Replace(tmpl)
}

// newKey returns a random version 4 UUID (RFC 9562), the key form every
// API accepts.
func newKey() string { return uuid.NewString() }

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
