package canon

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
)

// The strict JSON reader is written by hand rather than taken from
// encoding/json or a tokenizer library because the contract needs, in one
// pass and without building maps: numbers kept as their exact lexemes,
// refusal of names that differ only in case, refusal of lone surrogates in
// \u escapes, a depth limit, and offsets into the input for error reports.
// It produces a flat "tape" of nodes that the writers for the json, jcs and
// schema modes walk; no Go values are built.

type kind uint8

const (
	kindNull kind = iota + 1
	kindFalse
	kindTrue
	kindNumber
	kindString
	kindArray
	kindObject
)

const (
	flagDecoded  uint8 = 1 << iota // string content lives in doc.arena (it had escapes)
	flagASCII                      // string content is pure ASCII
	flagPlainInt                   // number is an integer lexeme of at most 15 digits
)

// node is one JSON value on the tape. Object members are laid out as a
// string node (the name) followed by the value's subtree.
type node struct {
	kind  kind
	flags uint8
	off   int32 // offset of the token in the input, for error reports
	start int32 // string: content; number: lexeme (in src or arena, see flagDecoded)
	end   int32
	count int32 // array: elements; object: members
	size  int32 // nodes in this subtree, itself included
}

// doc is a parsed document plus the scratch space its writers use. A doc is
// not safe for concurrent use; docs are recycled through docPool.
type doc struct {
	src     []byte
	arena   []byte
	nodes   []node
	members []member
	folds   []byte
	foldIdx []foldKey
}

// Docs are recycled through keptDocs first and docPool second. A
// sync.Pool is emptied by two garbage collections in a row, after which
// the next calls would grow a tape again; the few docs in keptDocs
// survive collections, so steady-state canonicalisation allocates nothing
// even when the rest of the program makes garbage. keptDocs holds at most
// len(keptDocs) docs, each bounded as putDoc says (about 8 MiB for a body
// at DefaultMaxBytes); the rest go to docPool.
var (
	keptDocs [4]atomic.Pointer[doc]
	docPool  = sync.Pool{New: func() any { return new(doc) }}
)

func getDoc() *doc {
	for i := range keptDocs {
		if d := keptDocs[i].Swap(nil); d != nil {
			return d
		}
	}
	return docPool.Get().(*doc)
}

func putDoc(d *doc) {
	// 1<<18 nodes (6 MiB) cover a DefaultMaxBytes body of API-like density
	// (about 10 bytes a node), so bodies up to the default limit reuse
	// their tape instead of growing a new one on every call.
	if cap(d.nodes) > 1<<18 || cap(d.arena) > 1<<20 {
		return // do not keep huge buffers alive
	}
	d.src = nil
	for i := range keptDocs {
		if keptDocs[i].Load() == nil && keptDocs[i].CompareAndSwap(nil, d) {
			return
		}
	}
	docPool.Put(d)
}

func (d *doc) bytes(n *node) []byte {
	if n.flags&flagDecoded != 0 {
		return d.arena[n.start:n.end]
	}
	return d.src[n.start:n.end]
}

// parse reads src as exactly one JSON text (RFC 8259) under the contract's
// strict rules and fills d.nodes.
func (d *doc) parse(src []byte, maxDepth int) error {
	d.src = src
	d.arena = d.arena[:0]
	d.nodes = d.nodes[:0]
	if len(src) > math.MaxInt32 {
		return &Error{Code: CodeBodyTooLarge, Offset: -1, Reason: "body larger than 2 GiB"}
	}
	p := parser{src: src, maxDepth: maxDepth, nodes: d.nodes, arena: d.arena}
	p.skipSpace()
	err := p.value()
	// The tape and arena keep their grown capacity for the next call
	// even when the document is refused.
	d.nodes, d.arena = p.nodes, p.arena
	if err != nil {
		return err
	}
	p.skipSpace()
	if p.pos != len(src) {
		return syntaxErr(p.pos, "unexpected data after the top-level value")
	}
	return nil
}

// parser holds the tape and arena it fills itself rather than through
// its doc, which saves a load on every node appended.
type parser struct {
	src      []byte
	pos      int
	depth    int
	maxDepth int
	nodes    []node
	arena    []byte
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() error {
	if p.pos >= len(p.src) {
		return syntaxErr(p.pos, "unexpected end of input")
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.container(kindObject)
	case c == '[':
		return p.container(kindArray)
	case c == '"':
		return p.string()
	case c == 't':
		return p.literal("true", kindTrue)
	case c == 'f':
		return p.literal("false", kindFalse)
	case c == 'n':
		return p.literal("null", kindNull)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return syntaxErr(p.pos, "unexpected character")
	}
}

func (p *parser) literal(word string, k kind) error {
	if len(p.src)-p.pos < len(word) || string(p.src[p.pos:p.pos+len(word)]) != word {
		return syntaxErr(p.pos, "invalid literal")
	}
	p.nodes = append(p.nodes, node{kind: k, off: int32(p.pos), size: 1})
	p.pos += len(word)
	return nil
}

// container reads an object or an array; the opening byte is at p.pos.
func (p *parser) container(k kind) error {
	p.depth++
	if p.depth > p.maxDepth {
		return syntaxErr(p.pos, "nesting deeper than the limit of "+strconv.Itoa(p.maxDepth))
	}
	idx := len(p.nodes)
	p.nodes = append(p.nodes, node{kind: k, off: int32(p.pos)})
	closer := byte(']')
	if k == kindObject {
		closer = '}'
	}
	p.pos++
	p.skipSpace()
	count := 0
	if p.pos < len(p.src) && p.src[p.pos] == closer {
		p.pos++
	} else {
		for {
			if k == kindObject {
				if p.pos >= len(p.src) || p.src[p.pos] != '"' {
					return syntaxErr(p.pos, "expected a member name")
				}
				if err := p.string(); err != nil {
					return err
				}
				p.skipSpace()
				if p.pos >= len(p.src) || p.src[p.pos] != ':' {
					return syntaxErr(p.pos, "expected ':' after a member name")
				}
				p.pos++
				p.skipSpace()
			}
			if err := p.value(); err != nil {
				return err
			}
			count++
			p.skipSpace()
			if p.pos >= len(p.src) {
				return syntaxErr(p.pos, "unexpected end of input")
			}
			if c := p.src[p.pos]; c == ',' {
				p.pos++
				p.skipSpace()
				continue
			} else if c == closer {
				p.pos++
				break
			}
			return syntaxErr(p.pos, "expected ',' or '"+string(closer)+"'")
		}
	}
	n := &p.nodes[idx]
	n.count = int32(count)
	n.size = int32(len(p.nodes) - idx)
	p.depth--
	return nil
}

// string reads a string token; p.pos is at the opening quote. Strings
// without escapes are referenced in place; others are decoded into the arena.
func (p *parser) string() error {
	src := p.src
	start := p.pos + 1
	flags := flagASCII
	for i := start; ; {
		// Skip eight plain bytes at a time (none a quote, a backslash, a
		// control character or non-ASCII) and land on the first byte that
		// is not.
		if i+8 <= len(src) {
			m := stop8(binary.LittleEndian.Uint64(src[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else if i >= len(src) {
			return syntaxErr(p.pos, "unterminated string")
		}
		c := src[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"':
				p.nodes = append(p.nodes, node{kind: kindString, flags: flags, off: int32(p.pos), start: int32(start), end: int32(i), size: 1})
				p.pos = i + 1
				return nil
			case c == '\\':
				return p.escapedString(start, i, flags)
			case c < 0x20:
				return syntaxErr(i, "control character in a string")
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && size == 1 {
			return syntaxErr(i, "invalid UTF-8")
		}
		flags &^= flagASCII
		i += size
	}
}

// stop8 returns, in the high bit of each byte, which of the eight bytes of
// w (little-endian) a string scan must stop at: '"', '\\', below 0x20 or
// above 0x7F. Borrows can only mark bytes above the first marked one, so
// the lowest set bit finds the first stop byte exactly; 0 means none.
func stop8(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := w ^ (ones * '"')
	bs := w ^ (ones * '\\')
	return ((w - ones*0x20) | (q - ones) | (bs - ones) | w) & highs
}

func (p *parser) escapedString(start, i int, flags uint8) error {
	src := p.src
	a := append(p.arena, src[start:i]...)
	astart := len(p.arena)
	for {
		if i >= len(src) {
			return syntaxErr(p.pos, "unterminated string")
		}
		c := src[i]
		switch {
		case c == '"':
			p.arena = a
			p.nodes = append(p.nodes, node{kind: kindString, flags: flags | flagDecoded, off: int32(p.pos), start: int32(astart), end: int32(len(a)), size: 1})
			p.pos = i + 1
			return nil
		case c == '\\':
			if i+1 >= len(src) {
				return syntaxErr(p.pos, "unterminated string")
			}
			switch e := src[i+1]; e {
			case '"', '\\', '/':
				a = append(a, e)
			case 'b':
				a = append(a, '\b')
			case 'f':
				a = append(a, '\f')
			case 'n':
				a = append(a, '\n')
			case 'r':
				a = append(a, '\r')
			case 't':
				a = append(a, '\t')
			case 'u':
				r, ok := hex4(src[i+2:])
				if !ok {
					return syntaxErr(i, "invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if r < 0xDC00 && len(src) >= i+12 && src[i+6] == '\\' && src[i+7] == 'u' {
						r2, ok = hex4(src[i+8:])
						ok = ok && r2 >= 0xDC00 && r2 <= 0xDFFF
					}
					if !ok {
						return syntaxErr(i, "lone surrogate in a \\u escape")
					}
					r = utf16.DecodeRune(r, r2)
					i += 6
				}
				if r >= utf8.RuneSelf {
					flags &^= flagASCII
				}
				a = utf8.AppendRune(a, r)
				i += 6
				continue
			default:
				return syntaxErr(i, "invalid escape")
			}
			i += 2
		case c < 0x20:
			return syntaxErr(i, "control character in a string")
		case c < utf8.RuneSelf:
			a = append(a, c)
			i++
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				return syntaxErr(i, "invalid UTF-8")
			}
			flags &^= flagASCII
			a = append(a, src[i:i+size]...)
			i += size
		}
	}
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number reads a number lexeme (RFC 8259 grammar). Numbers whose value would
// overflow an IEEE-754 double are outside the contract and refused, since
// no receiver can read them back as the same number.
func (p *parser) number() error {
	src, start := p.src, p.pos
	i := start
	if src[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(src) && src[i] == '0' {
		i++
	} else if digits() == 0 {
		return syntaxErr(start, "invalid number")
	}
	intLen := i - start
	plain := true
	if i < len(src) && src[i] == '.' {
		i++
		plain = false
		if digits() == 0 {
			return syntaxErr(start, "invalid number")
		}
	}
	exp := false
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		plain, exp = false, true
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if digits() == 0 {
			return syntaxErr(start, "invalid number")
		}
	}
	if exp || intLen > 300 {
		if f, err := strconv.ParseFloat(string(src[start:i]), 64); err != nil && math.IsInf(f, 0) {
			return syntaxErr(start, "number outside the range of a double")
		}
	}
	var flags uint8
	if plain && intLen <= 15 {
		flags = flagPlainInt
	}
	p.nodes = append(p.nodes, node{kind: kindNumber, flags: flags, off: int32(start), start: int32(start), end: int32(i), size: 1})
	p.pos = i
	return nil
}
