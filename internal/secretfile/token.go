package secretfile

import (
	"errors"
	"fmt"
	"strings"
)

// MinTokenChars is the least length of a token CheckToken accepts: 22
// characters, 128 bits at six bits a character (base64url); a token of
// hex digits only needs 32 (four bits each).
const MinTokenChars = 22

// minHexTokenChars is MinTokenChars for a token of hex digits only.
const minHexTokenChars = 32

// CheckToken reports whether tok — an operator or API token read from a
// secret file — can carry 128 random bits: printable ASCII without white
// space, at least MinTokenChars characters (32 when all are hex digits),
// and not of low variety: at least 8 distinct characters, none making up
// more than half of it, not one short pattern repeated, not mostly a run
// such as "abcdef…". The bounds are set so that a random token passes: 32
// random hex digits (openssl rand -hex 16, the worst case) fail about one
// time in 28 million, nearly all for having fewer than 8 distinct digits
// (one digit in more than half of them: one in 80 billion; a bound of a
// third refused one in 30,000). The error says to draw another. The
// token itself is never in the error.
func CheckToken(tok string) error {
	const draw = "draw one from a random source, such as openssl rand -hex 16"
	hex := true
	counts := map[rune]int{}
	for _, c := range tok {
		if c <= ' ' || c > '~' {
			return errors.New("a token holds white space or a character other than printable ASCII")
		}
		counts[c]++
		hex = hex && strings.ContainsRune("0123456789abcdefABCDEF", c)
	}
	switch {
	case len(tok) < MinTokenChars:
		return fmt.Errorf("a token of %d characters is too short: at least %d (128 bits); %s", len(tok), MinTokenChars, draw)
	case hex && len(tok) < minHexTokenChars:
		return fmt.Errorf("a token of %d hex digits is too short: at least %d (128 bits); %s", len(tok), minHexTokenChars, draw)
	case len(counts) < 8:
		return fmt.Errorf("a token of %d distinct characters is not random enough: at least 8; %s", len(counts), draw)
	}
	for _, n := range counts {
		if 2*n > len(tok) {
			return fmt.Errorf("a token with one character %d times in %d is not random enough; %s", n, len(tok), draw)
		}
	}
	if periodic(tok) {
		return fmt.Errorf("a token that repeats one pattern is not random enough; %s", draw)
	}
	steps := 0
	for i := 1; i < len(tok); i++ {
		if d := int(tok[i]) - int(tok[i-1]); d == 1 || d == -1 {
			steps++
		}
	}
	if 2*steps >= len(tok) {
		return fmt.Errorf("a token that is mostly a run of neighbouring characters is not random enough; %s", draw)
	}
	return nil
}

// periodic reports whether s is one pattern of at most half its length
// repeated (the last repetition may be cut short).
func periodic(s string) bool {
	for p := 1; p <= len(s)/2; p++ {
		if s[p:] == s[:len(s)-p] {
			return true
		}
	}
	return false
}
