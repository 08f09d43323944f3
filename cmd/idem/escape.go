package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// printable returns stored text — evidence, handles, actors, audit
// details, error texts, anything a client, a downstream or an operator
// wrote — made safe for a terminal: every C0 control (line breaks and
// tabs included), DEL, every C1 control, and the bidirectional overrides
// and isolates (U+202A–U+202E, U+2066–U+2069), which can move or hide
// text on the screen, are written as Go escapes (\n, \x1b, \u202e); so is
// a byte that is not UTF-8 (\xff), and a backslash is doubled, so the
// output reads back unambiguously. Every printer of "idem" uses it for
// every stored text it shows.
func printable(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether r, above ASCII, is a C1 control or a
// bidirectional override or isolate.
func unsafeRune(r rune) bool {
	return r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// needsEscape reports whether printable would change s.
func needsEscape(s string) bool {
	for i, r := range s {
		if r < 0x20 || r == 0x7f || r == '\\' || unsafeRune(r) || r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") {
			return true
		}
	}
	return false
}

// escapeJSON returns the JSON text b with the characters encoding/json
// leaves as they are but a terminal must not get — DEL, C1 controls and
// bidi overrides and isolates — written as \u escapes: the same JSON
// value, safe to print (encoding/json already escapes C0 controls).
func escapeJSON(b []byte) []byte {
	s := string(b)
	if !strings.ContainsFunc(s, func(r rune) bool { return r == 0x7f || unsafeRune(r) }) {
		return b
	}
	var out strings.Builder
	for _, r := range s {
		if r == 0x7f || unsafeRune(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.WriteRune(r)
		}
	}
	return []byte(out.String())
}
