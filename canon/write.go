package canon

import (
	"math"
	"strconv"
)

// appendValue writes the value at tape index i in canonical form: objects
// with members sorted (by UTF-8 bytes, or UTF-16 code units when jcs), no
// insignificant whitespace, array order kept, strings in the one escape form
// of RFC 8785 section 3.2.2.2, and numbers kept lexically — or, when jcs, in
// the ECMAScript form of RFC 8785 section 3.2.2.3.
func (d *doc) appendValue(dst []byte, i int, jcs bool) ([]byte, error) {
	n := &d.nodes[i]
	switch n.kind {
	case kindNull:
		return append(dst, "null"...), nil
	case kindTrue:
		return append(dst, "true"...), nil
	case kindFalse:
		return append(dst, "false"...), nil
	case kindNumber:
		if jcs {
			return appendJCSNumber(dst, d.src[n.start:n.end], n.flags&flagPlainInt != 0)
		}
		return append(dst, d.src[n.start:n.end]...), nil
	case kindString:
		return d.appendString(dst, n), nil
	case kindArray:
		dst = append(dst, '[')
		j := i + 1
		for k := range n.count {
			if k > 0 {
				dst = append(dst, ',')
			}
			if c := &d.nodes[j]; c.kind == kindString && c.flags&flagDecoded == 0 {
				dst = append(dst, d.src[c.start-1:c.end+1]...) // as appendString
			} else {
				var err error
				if dst, err = d.appendValue(dst, j, jcs); err != nil {
					return dst, err
				}
			}
			j += int(d.nodes[j].size)
		}
		return append(dst, ']'), nil
	default:
		base, err := d.collectMembers(i, jcs)
		if err != nil {
			d.members = d.members[:base]
			return dst, err
		}
		dst = append(dst, '{')
		for k := base; k < len(d.members); k++ {
			if k > base {
				dst = append(dst, ',')
			}
			m := &d.members[k]
			if m.raw {
				dst = append(dst, d.src[m.start-1:m.end+1]...)
				dst = append(dst, ':')
			} else {
				dst = appendQuoted(dst, d.arena[m.start:m.end])
				dst = append(dst, ':')
			}
			val := int(m.val)
			// Escape-free strings and, but in jcs, numbers are written
			// here as appendValue would write them, saving a call.
			if c := &d.nodes[val]; c.kind == kindString && c.flags&flagDecoded == 0 {
				dst = append(dst, d.src[c.start-1:c.end+1]...)
				continue
			} else if c.kind == kindNumber && !jcs {
				dst = append(dst, d.src[c.start:c.end]...)
				continue
			}
			// Nested objects push their members above ours and truncate
			// back before returning, so index k stays valid.
			if dst, err = d.appendValue(dst, val, jcs); err != nil {
				d.members = d.members[:base]
				return dst, err
			}
		}
		d.members = d.members[:base]
		return append(dst, '}'), nil
	}
}

func (d *doc) appendString(dst []byte, n *node) []byte {
	if n.flags&flagDecoded == 0 {
		// Validated and escape-free: the raw token, quotes included, is
		// already canonical.
		return append(dst, d.src[n.start-1:n.end+1]...)
	}
	return appendQuoted(dst, d.arena[n.start:n.end])
}

const hexDigits = "0123456789abcdef"

// appendQuoted writes s (valid UTF-8) as a JSON string: only '"', '\\' and
// control characters are escaped, with the short forms where JSON has them
// and \u00xx (lower-case hex) otherwise.
func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJCSNumber writes a number lexeme the way ECMAScript's
// Number.prototype.toString writes the double nearest to it (RFC 8785
// section 3.2.2.3). Short integers are already in that form, except -0.
func appendJCSNumber(dst, lexeme []byte, plainInt bool) ([]byte, error) {
	if plainInt {
		if string(lexeme) == "-0" {
			return append(dst, '0'), nil
		}
		return append(dst, lexeme...), nil
	}
	f, err := strconv.ParseFloat(string(lexeme), 64)
	if err != nil && (math.IsInf(f, 0) || math.IsNaN(f)) {
		return dst, syntaxErr(-1, "number outside the range of a double")
	}
	return appendES6(dst, f), nil
}

// appendES6 formats a finite double as ECMAScript Number::toString does.
// strconv gives the shortest round-tripping digits; only the layout rules
// of ECMA-262 section 6.1.6.1.20 are applied here.
func appendES6(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±XX
	var digits [24]byte
	k := 0
	i := 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[k] = e[i]
			k++
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	n := exp + 1 // position of the decimal point relative to the digits
	ds := digits[:k]
	switch {
	case k <= n && n <= 21:
		dst = append(dst, ds...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, ds[:n]...)
		dst = append(dst, '.')
		dst = append(dst, ds[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, ds...)
	default:
		dst = append(dst, ds[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, ds[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
