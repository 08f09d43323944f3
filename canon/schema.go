package canon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Schema declares the shape of a payload for ModeSchema: a top-level JSON
// object whose members are Fields. Members the schema does not name are
// refused. Revision is bound into every fingerprint, so changing what a
// schema accepts or how it normalises means a new Revision.
//
// A Schema is a plain value: build it in Go or load it with ParseSchema.
// Call Validate once before use (ParseSchema does). A Schema must not be
// changed while it is in use; reading it concurrently is safe.
type Schema struct {
	Revision string            `json:"revision"`
	Fields   map[string]*Field `json:"fields"`
}

// Type is a field type.
type Type string

const (
	TypeString  Type = "string"  // a JSON string; MaxLength and Pattern apply
	TypeEnum    Type = "enum"    // a JSON string, one of Values
	TypeBoolean Type = "boolean" // true or false
	TypeDecimal Type = "decimal" // a JSON string holding a fixed-point decimal, written back at Scale
	TypeInteger Type = "integer" // a JSON number without fraction or exponent that fits an int64
	TypeObject  Type = "object"  // a nested object described by Fields
	TypeArray   Type = "array"   // an array whose elements are described by Items (any value if nil)
	TypeAny     Type = "any"     // any JSON value, canonicalised as in ModeJSON
)

// NullRule says what an explicit null means for a field.
type NullRule string

const (
	NullReject NullRule = ""       // null is refused (the default)
	NullKeep   NullRule = "keep"   // null is a value of its own, distinct from absent
	NullAbsent NullRule = "absent" // null means the same as leaving the member out
)

// Field describes one member. The zero value of every constraint means "no
// constraint".
type Field struct {
	Type     Type     `json:"type"`
	Required bool     `json:"required,omitempty"`
	Null     NullRule `json:"null,omitempty"`
	// Scale is the number of fraction digits of a decimal. Inputs may carry
	// fewer ("12.5" at scale 2) and are padded; more is refused ("12.505").
	Scale int `json:"scale,omitempty"`
	// Positive refuses zero and negative decimals and integers.
	Positive bool `json:"positive,omitempty"`
	// MaxLength limits a string's length in characters.
	MaxLength int `json:"max_length,omitempty"`
	// Pattern is an RE2 expression the whole string must match.
	Pattern string            `json:"pattern,omitempty"`
	Values  []string          `json:"values,omitempty"`
	Fields  map[string]*Field `json:"fields,omitempty"`
	Items   *Field            `json:"items,omitempty"`
}

// ParseSchema reads a schema from its JSON form, for example
//
//	{"revision": "payments.v1", "fields": {
//	  "amount": {"type": "decimal", "scale": 2, "required": true, "positive": true}}}
//
// Unknown members are refused, and the result is validated.
func ParseSchema(r io.Reader) (*Schema, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Schema
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("canon: reading schema: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate reports the first problem with s: a missing revision, an
// unknown type or null rule, a constraint on a type it does not apply to,
// or a pattern that does not compile.
func (s *Schema) Validate() error {
	if s.Revision == "" {
		return fmt.Errorf("canon: schema without a revision")
	}
	return validateFields("$", s.Fields)
}

func validateFields(path string, fields map[string]*Field) error {
	if len(fields) == 0 {
		return fmt.Errorf("canon: schema %s: an object needs at least one field", path)
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if err := fields[name].validate(path + "." + name); err != nil {
			return err
		}
	}
	return nil
}

func (f *Field) validate(path string) error {
	bad := func(what string) error { return fmt.Errorf("canon: schema %s: %s", path, what) }
	if f == nil {
		return bad("null field")
	}
	switch f.Null {
	case NullReject, NullKeep, NullAbsent:
	default:
		return bad("unknown null rule " + strconv.Quote(string(f.Null)))
	}
	if f.Scale != 0 && f.Type != TypeDecimal || f.Scale < 0 || f.Scale > 18 {
		return bad("scale applies to decimals only, 0 to 18")
	}
	if f.Positive && f.Type != TypeDecimal && f.Type != TypeInteger {
		return bad("positive applies to decimals and integers only")
	}
	if (f.MaxLength != 0 || f.Pattern != "") && f.Type != TypeString {
		return bad("max_length and pattern apply to strings only")
	}
	if (len(f.Values) != 0) != (f.Type == TypeEnum) {
		return bad("values go with, and only with, type enum")
	}
	if (f.Fields != nil) != (f.Type == TypeObject) {
		return bad("fields go with, and only with, type object")
	}
	if f.Items != nil && f.Type != TypeArray {
		return bad("items apply to arrays only")
	}
	switch f.Type {
	case TypeString:
		if f.Pattern != "" {
			if _, err := pattern(f.Pattern); err != nil {
				return bad("pattern: " + err.Error())
			}
		}
	case TypeObject:
		return validateFields(path, f.Fields)
	case TypeArray:
		if f.Items != nil {
			return f.Items.validate(path + "[]")
		}
	case TypeEnum, TypeBoolean, TypeDecimal, TypeInteger, TypeAny:
	default:
		return bad("unknown type " + strconv.Quote(string(f.Type)))
	}
	return nil
}

// patterns caches compiled, anchored patterns; regexp.Regexp is safe for
// concurrent use.
var patterns sync.Map

func pattern(p string) (*regexp.Regexp, error) {
	if re, ok := patterns.Load(p); ok {
		return re.(*regexp.Regexp), nil
	}
	re, err := regexp.Compile(`^(?:` + p + `)$`)
	if err != nil {
		return nil, err
	}
	patterns.Store(p, re)
	return re, nil
}

func (s *Schema) append(dst []byte, d *doc) ([]byte, error) {
	// Strict parsing comes before the schema: duplicate names anywhere are
	// INVALID_JSON, even where the schema would refuse something first.
	if err := d.checkNames(); err != nil {
		return dst, err
	}
	if d.nodes[0].kind != kindObject {
		return dst, schemaErr("", "the payload must be a JSON object")
	}
	return appendObject(dst, d, 0, s.Fields, "$")
}

// checkNames refuses duplicate member names, also case-only ones, in every
// object of the document.
func (d *doc) checkNames() error {
	for i := range d.nodes {
		if d.nodes[i].kind == kindObject {
			base, err := d.collectMembers(i, false)
			d.members = d.members[:base]
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func appendObject(dst []byte, d *doc, i int, fields map[string]*Field, path string) ([]byte, error) {
	base, err := d.collectMembers(i, false)
	defer func() { d.members = d.members[:base] }()
	if err != nil {
		return dst, err
	}
	dst = append(dst, '{')
	present, first := 0, true
	for k := base; k < len(d.members); k++ {
		m := d.members[k]
		name := d.name(&m)
		f := fields[string(name)]
		mpath := path + "." + shortName(name)
		if f == nil {
			return dst, schemaErr(mpath, "unknown member")
		}
		if d.nodes[int(m.val)].kind == kindNull {
			switch f.Null {
			case NullAbsent:
				continue
			case NullReject:
				return dst, schemaErr(mpath, "null is not allowed")
			}
		}
		if f.Required {
			present++
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendQuoted(dst, name)
		dst = append(dst, ':')
		if dst, err = appendField(dst, d, int(m.val), f, mpath); err != nil {
			return dst, err
		}
	}
	if present != countRequired(fields) {
		return dst, schemaErr(path+"."+firstMissing(d.members[base:], fields, d), "required member missing")
	}
	return append(dst, '}'), nil
}

func countRequired(fields map[string]*Field) int {
	n := 0
	for _, f := range fields {
		if f.Required {
			n++
		}
	}
	return n
}

func firstMissing(ms []member, fields map[string]*Field, d *doc) string {
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if !fields[name].Required {
			continue
		}
		found := false
		for _, m := range ms {
			if string(d.name(&m)) == name && d.nodes[int(m.val)].kind != kindNull {
				found = true
			}
		}
		if !found {
			return name
		}
	}
	return "?"
}

// shortName renders a member name for an error path, cut at 64 bytes.
func shortName(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
		return string(b) + "…"
	}
	return string(b)
}

// fieldKinds is the JSON kind each typed field must have.
var fieldKinds = map[Type]kind{TypeString: kindString, TypeEnum: kindString, TypeDecimal: kindString,
	TypeInteger: kindNumber, TypeObject: kindObject, TypeArray: kindArray}

func appendField(dst []byte, d *doc, i int, f *Field, path string) ([]byte, error) {
	n := &d.nodes[i]
	if n.kind == kindNull {
		if f.Null == NullKeep {
			return append(dst, "null"...), nil
		}
		return dst, schemaErr(path, "null is not allowed")
	}
	if k, ok := fieldKinds[f.Type]; ok && n.kind != k {
		return dst, schemaErr(path, "expected "+string(f.Type))
	}
	switch f.Type {
	case TypeString:
		s := d.bytes(n)
		if f.MaxLength > 0 && utf8.RuneCount(s) > f.MaxLength {
			return dst, schemaErr(path, "longer than "+strconv.Itoa(f.MaxLength)+" characters")
		}
		if f.Pattern != "" {
			re, err := pattern(f.Pattern)
			if err != nil || !re.Match(s) {
				return dst, schemaErr(path, "does not match the required pattern")
			}
		}
		return d.appendString(dst, n), nil
	case TypeEnum:
		if !slices.Contains(f.Values, string(d.bytes(n))) {
			return dst, schemaErr(path, "not one of the allowed values")
		}
		return d.appendString(dst, n), nil
	case TypeBoolean:
		if n.kind != kindTrue && n.kind != kindFalse {
			return dst, schemaErr(path, "expected boolean")
		}
		return d.appendValue(dst, i, false)
	case TypeDecimal:
		return appendDecimal(dst, d.bytes(n), f, path)
	case TypeInteger:
		return appendInteger(dst, d.bytes(n), f, path)
	case TypeObject:
		return appendObject(dst, d, i, f.Fields, path)
	case TypeArray:
		if f.Items == nil {
			return d.appendValue(dst, i, false)
		}
		dst = append(dst, '[')
		j := i + 1
		for k := range n.count {
			if k > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendField(dst, d, j, f.Items, path+"["+strconv.Itoa(int(k))+"]"); err != nil {
				return dst, err
			}
			j += int(d.nodes[j].size)
		}
		return append(dst, ']'), nil
	default: // TypeAny
		return d.appendValue(dst, i, false)
	}
}

// MaxDecimalDigits bounds the integer part of every TypeDecimal value: a
// decimal with more digits before the point is refused. No amount needs
// more, and it bounds the length of a decimal as MaxLength bounds a
// string's.
const MaxDecimalDigits = 30

// appendDecimal writes a decimal string at the field's scale:
// -?(0|[1-9][0-9]*)(\.[0-9]+)? with at most Scale fraction digits, padded
// with zeros to exactly Scale; negative zero is written as zero.
func appendDecimal(dst, s []byte, f *Field, path string) ([]byte, error) {
	bad := func(why string) ([]byte, error) { return dst, schemaErr(path, why) }
	neg := len(s) > 0 && s[0] == '-'
	rest := s
	if neg {
		rest = s[1:]
	}
	intPart, frac, dot := bytes.Cut(rest, []byte{'.'})
	if len(intPart) == 0 || !allDigits(intPart) || (dot && (len(frac) == 0 || !allDigits(frac))) {
		return bad("not a decimal number")
	}
	if len(intPart) > 1 && intPart[0] == '0' {
		return bad("decimal with a leading zero")
	}
	if len(intPart) > MaxDecimalDigits {
		return bad("decimal with too many digits")
	}
	if len(frac) > f.Scale {
		return bad("more than " + strconv.Itoa(f.Scale) + " fraction digits")
	}
	zero := len(bytes.Trim(intPart, "0")) == 0 && len(bytes.Trim(frac, "0")) == 0
	if f.Positive && (neg || zero) {
		return bad("must be greater than zero")
	}
	dst = append(dst, '"')
	if neg && !zero {
		dst = append(dst, '-')
	}
	dst = append(dst, intPart...)
	if f.Scale > 0 {
		dst = append(dst, '.')
		dst = append(dst, frac...)
		for range f.Scale - len(frac) {
			dst = append(dst, '0')
		}
	}
	return append(dst, '"'), nil
}

func appendInteger(dst, s []byte, f *Field, path string) ([]byte, error) {
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		return dst, schemaErr(path, "not an integer that fits 64 bits")
	}
	if f.Positive && v <= 0 {
		return dst, schemaErr(path, "must be greater than zero")
	}
	return strconv.AppendInt(dst, v, 10), nil
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
