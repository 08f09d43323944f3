package canon

import (
	"bytes"
	"encoding/binary"
	"slices"
	"unicode"
	"unicode/utf8"
)

// member is one object member during writing: where its decoded name is
// and the tape index of its value. It holds no pointers, so that filling
// and sorting members costs no write barriers; doc.name resolves the name.
// key holds the name's first 8 bytes, big-endian and zero-padded, so that
// most comparisons are one integer comparison. raw says the name is
// escape-free input text at src[start:end], already canonical (so the
// quoted token src[start-1:end+1] can be copied as it is); otherwise the
// name is arena[start:end].
type member struct {
	key        uint64
	start, end int32
	val        int32
	raw        bool
	ascii      bool
}

// name returns m's decoded name.
func (d *doc) name(m *member) []byte {
	if m.raw {
		return d.src[m.start:m.end]
	}
	return d.arena[m.start:m.end]
}

// prefixKey returns the first 8 bytes of s as a big-endian integer, padded
// with zero bytes. Keys compare like the bytes they hold, so a < b between
// keys means bytes.Compare(a, b) < 0; equal keys decide nothing.
func prefixKey(s []byte) uint64 {
	if len(s) >= 8 {
		return binary.BigEndian.Uint64(s)
	}
	var k uint64
	for i, c := range s {
		k |= uint64(c) << (56 - 8*i)
	}
	return k
}

// compareMembers orders members by name bytes.
func (d *doc) compareMembers(a, b *member) int {
	if a.key != b.key {
		if a.key < b.key {
			return -1
		}
		return 1
	}
	return bytes.Compare(d.name(a), d.name(b))
}

// sortMembers sorts ms by name bytes: insertion sort on the prefix keys for
// the small objects APIs send, the library sort above 16 members.
func (d *doc) sortMembers(ms []member) {
	if len(ms) > 16 {
		slices.SortFunc(ms, func(a, b member) int { return d.compareMembers(&a, &b) })
		return
	}
	for i := 1; i < len(ms); i++ {
		if d.compareMembers(&ms[i-1], &ms[i]) <= 0 {
			continue
		}
		m := ms[i]
		j := i
		for ; j > 0 && d.compareMembers(&ms[j-1], &m) > 0; j-- {
			ms[j] = ms[j-1]
		}
		ms[j] = m
	}
}

// upperKey upper-cases the ASCII letters of a prefix key of an ASCII name
// (every byte below 0x80), eight bytes at a time.
func upperKey(k uint64) uint64 {
	const ones = 0x0101010101010101
	geA := k + ones*(0x80-'a')   // high bit set where byte >= 'a'
	gtZ := k + ones*(0x80-'z'-1) // high bit set where byte > 'z'
	lower := geA &^ gtZ & (ones * 0x80)
	return k ^ lower>>2 // clear 0x20 in the lower-case letters
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
	allASCII := true
	ms := d.members
	for range obj.count {
		name := &d.nodes[j]
		ascii := name.flags&flagASCII != 0
		allASCII = allASCII && ascii
		raw := name.flags&flagDecoded == 0
		var key uint64
		if raw && int(name.start)+8 <= len(d.src) {
			// The name is followed in the input by at least its closing
			// quote, so eight bytes can be loaded and the excess masked.
			key = binary.BigEndian.Uint64(d.src[name.start:])
			if l := name.end - name.start; l < 8 {
				key &^= ^uint64(0) >> (8 * l)
			}
		} else {
			key = prefixKey(d.bytes(name))
		}
		ms = append(ms, member{key: key, start: name.start, end: name.end, val: int32(j + 1), raw: raw, ascii: ascii})
		j += 1 + int(d.nodes[j+1].size)
	}
	d.members = ms
	ms = ms[base:]
	if jcs {
		slices.SortFunc(ms, func(a, b member) int { return compareUTF16(d.name(&a), d.name(&b)) })
	} else {
		d.sortMembers(ms)
	}
	for k := 1; k < len(ms); k++ {
		if ms[k-1].key == ms[k].key && bytes.Equal(d.name(&ms[k-1]), d.name(&ms[k])) {
			return base, syntaxErr(int(d.nodes[ms[k].val-1].off), "duplicate member name")
		}
	}
	// RFC 8785 compares names by code units only, and its own test
	// vectors hold names that differ only in case, so ModeJCS keeps them;
	// the contract's own modes refuse them (docs/contract.md section 6).
	if len(ms) > 1 && !jcs {
		k := -1
		if allASCII && len(ms) <= 32 {
			k = d.asciiFoldDuplicate(ms)
		} else {
			k = d.foldDuplicate(ms)
		}
		if k >= 0 {
			return base, syntaxErr(int(d.nodes[ms[k].val-1].off), "member names that differ only in case")
		}
	}
	return base, nil
}

// asciiFoldDuplicate is foldDuplicate for objects whose names are all
// ASCII: two such names are equal under case folding exactly when they have
// the same length and the same bytes once upper-cased, so pairs are
// compared by length and upper-cased prefix key first, and only pairs
// equal on both by foldEqual.
func (d *doc) asciiFoldDuplicate(ms []member) int {
	var keys [32]uint64
	for i := range ms {
		keys[i] = upperKey(ms[i].key)
	}
	for a := 1; a < len(ms); a++ {
		for b := range a {
			if keys[a] == keys[b] && ms[a].end-ms[a].start == ms[b].end-ms[b].start && d.foldEqual(&ms[a], &ms[b]) {
				return a
			}
		}
	}
	return -1
}

// foldDuplicate returns the index of a member whose name equals another's
// under simple case folding, or -1. Small objects are checked pairwise;
// larger ones by sorting folded keys.
func (d *doc) foldDuplicate(ms []member) int {
	if len(ms) <= 12 {
		for a := 1; a < len(ms); a++ {
			for b := range a {
				if d.foldEqual(&ms[a], &ms[b]) {
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
		d.folds = appendFold(d.folds, d.name(&m))
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
				if bytes.Equal(appendFold(nil, d.name(&m)), f) {
					return idx
				}
			}
		}
	}
	return -1
}

func (d *doc) foldEqual(a, b *member) bool {
	an, bn := d.name(a), d.name(b)
	if a.ascii && b.ascii {
		if len(an) != len(bn) {
			return false
		}
		for i := range an {
			if upperASCII(an[i]) != upperASCII(bn[i]) {
				return false
			}
		}
		return true
	}
	return bytes.EqualFold(an, bn)
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
