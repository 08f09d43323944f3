package canon

import (
	"bytes"
	"slices"
	"unicode"
	"unicode/utf8"
)

// member is one object member during writing: its decoded name and the tape
// index of its value.
type member struct {
	name  []byte
	ascii bool
	val   int
}

type foldKey struct{ start, end int }

// collectMembers appends the members of the object at tape index i to
// d.members, sorted (by UTF-16 code units when jcs, else by bytes), and
// refuses duplicate names and, unless jcs, names equal under Unicode simple
// case folding. It returns the start of the object's members in d.members;
// the caller truncates d.members back to it when done, so nested objects
// can push their own members above it.
func (d *doc) collectMembers(i int, jcs bool) (int, error) {
	obj := &d.nodes[i]
	base := len(d.members)
	j := i + 1
	for range obj.count {
		name := &d.nodes[j]
		d.members = append(d.members, member{name: d.bytes(name), ascii: name.flags&flagASCII != 0, val: j + 1})
		j += 1 + int(d.nodes[j+1].size)
	}
	ms := d.members[base:]
	if jcs {
		slices.SortFunc(ms, func(a, b member) int { return compareUTF16(a.name, b.name) })
	} else {
		slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(a.name, b.name) })
	}
	for k := 1; k < len(ms); k++ {
		if bytes.Equal(ms[k-1].name, ms[k].name) {
			return base, syntaxErr(int(d.nodes[ms[k].val-1].off), "duplicate member name")
		}
	}
	// RFC 8785 compares names by code units only, and its own test
	// vectors hold names that differ only in case, so ModeJCS keeps them;
	// the contract's own modes refuse them (docs/contract.md section 6).
	if len(ms) > 1 && !jcs {
		if k := d.foldDuplicate(ms); k >= 0 {
			return base, syntaxErr(int(d.nodes[ms[k].val-1].off), "member names that differ only in case")
		}
	}
	return base, nil
}

// foldDuplicate returns the index of a member whose name equals another's
// under simple case folding, or -1. Small objects are checked pairwise;
// larger ones by sorting folded keys.
func (d *doc) foldDuplicate(ms []member) int {
	if len(ms) <= 12 {
		for a := 1; a < len(ms); a++ {
			for b := range a {
				if foldEqual(ms[a], ms[b]) {
					return a
				}
			}
		}
		return -1
	}
	d.folds = d.folds[:0]
	d.foldIdx = d.foldIdx[:0]
	for _, m := range ms {
		s := len(d.folds)
		d.folds = appendFold(d.folds, m.name)
		d.foldIdx = append(d.foldIdx, foldKey{s, len(d.folds)})
	}
	keys := d.foldIdx
	slices.SortFunc(keys, func(a, b foldKey) int {
		return bytes.Compare(d.folds[a.start:a.end], d.folds[b.start:b.end])
	})
	for k := 1; k < len(keys); k++ {
		if bytes.Equal(d.folds[keys[k-1].start:keys[k-1].end], d.folds[keys[k].start:keys[k].end]) {
			// Report the member whose fold this is; any one of the pair will do.
			f := d.folds[keys[k].start:keys[k].end]
			for idx, m := range ms {
				if bytes.Equal(appendFold(nil, m.name), f) {
					return idx
				}
			}
		}
	}
	return -1
}

func foldEqual(a, b member) bool {
	if a.ascii && b.ascii {
		if len(a.name) != len(b.name) {
			return false
		}
		for i := range a.name {
			if upperASCII(a.name[i]) != upperASCII(b.name[i]) {
				return false
			}
		}
		return true
	}
	return bytes.EqualFold(a.name, b.name)
}

func upperASCII(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// appendFold appends s with every rune replaced by the smallest rune of its
// simple case-folding orbit, so two strings are equal after appendFold
// exactly when bytes.EqualFold says they are.
func appendFold(dst, s []byte) []byte {
	for len(s) > 0 {
		c := s[0]
		if c < utf8.RuneSelf {
			dst = append(dst, upperASCII(c))
			s = s[1:]
			continue
		}
		r, n := utf8.DecodeRune(s)
		s = s[n:]
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		dst = utf8.AppendRune(dst, least)
	}
	return dst
}

// compareUTF16 orders two UTF-8 strings by their UTF-16 code units, as
// RFC 8785 section 3.2.3 requires for member names.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			if a[0] != b[0] {
				return int(a[0]) - int(b[0])
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return int(ua) - int(ub)
			}
			return int(ra) - int(rb) // same high surrogate: low units order like the runes
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}
