// Package canon reads request payloads strictly and writes their canonical
// form, the bytes that a request fingerprint hashes (contract
// http.idempotency.v1, sections C5 and C6 of docs/contract.md).
//
// Four modes exist. ModeRaw hashes the exact bytes. ModeJSON parses strictly and
// writes members sorted by name, no insignificant whitespace, array order
// kept, strings in one escape form and numbers exactly as written (10.0 and
// 10 differ). ModeSchema does what ModeJSON does and then applies a declared Schema:
// unknown members are refused and typed fields are normalised (decimals at a
// fixed scale, exact integers, enums, null rules). ModeJCS is RFC 8785; it
// rewrites numbers as doubles, so it must not be used where the lexical
// scale of a number carries business meaning.
//
// Every JSON mode refuses duplicate member names (ModeJSON and ModeSchema
// also names that differ only in case; ModeJCS keeps those apart as RFC 8785
// does), invalid UTF-8, lone surrogates, numbers that overflow a
// double, nesting deeper than MaxDepth and bodies over MaxBytes. Refusals
// are *Error values with a stable Code.
//
// All functions are safe for concurrent use.
package canon

import (
	"fmt"
	"strconv"
)

// Mode selects how a payload is canonicalised.
type Mode string

const (
	ModeRaw    Mode = "raw"
	ModeJSON   Mode = "json"
	ModeSchema Mode = "schema"
	ModeJCS    Mode = "jcs"
)

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeRaw, ModeJSON, ModeSchema, ModeJCS:
		return m, nil
	}
	return "", fmt.Errorf("canon: unknown mode %q (want raw, json, schema or jcs)", s)
}

// Defaults for Options fields left at zero.
const (
	DefaultMaxBytes = 1 << 20 // 1 MiB
	DefaultMaxDepth = 64
)

// Options say how to canonicalise one operation's payloads. The zero value
// is ModeJSON with the default limits.
type Options struct {
	// Mode is the canonicalisation mode; "" means ModeJSON.
	Mode Mode
	// Schema is required in ModeSchema and ignored otherwise.
	Schema *Schema
	// MaxBytes limits the body as received, before any charset decoding;
	// 0 means DefaultMaxBytes.
	MaxBytes int
	// MaxDepth limits nesting of arrays and objects; 0 means DefaultMaxDepth.
	MaxDepth int
}

func (o Options) mode() Mode {
	if o.Mode == "" {
		return ModeJSON
	}
	return o.Mode
}

func (o Options) maxBytes() int {
	if o.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return o.MaxBytes
}

func (o Options) maxDepth() int {
	if o.MaxDepth <= 0 {
		return DefaultMaxDepth
	}
	return o.MaxDepth
}

// Result is a canonicalised payload.
type Result struct {
	// MediaType is the normalised media type that the fingerprint binds.
	MediaType string
	// Payload is the canonical payload. It never aliases the input body.
	Payload []byte
}

// Canonicalize checks contentType against the mode, decodes a UTF-16 body
// and returns the canonical payload. Refusals are *Error.
func Canonicalize(contentType string, body []byte, o Options) (Result, error) {
	if len(body) > o.maxBytes() {
		return Result{}, &Error{Code: CodeBodyTooLarge, Offset: -1, Reason: "body larger than " + strconv.Itoa(o.maxBytes()) + " bytes"}
	}
	mt, decode, err := normaliseMediaType(contentType, o.mode())
	if err != nil {
		return Result{}, err
	}
	if decode != "" {
		if body, err = decodeUTF16(body, decode); err != nil {
			return Result{}, err
		}
	}
	p, err := o.Append(make([]byte, 0, len(body)), body)
	if err != nil {
		return Result{}, err
	}
	return Result{MediaType: mt, Payload: p}, nil
}

// Append appends the canonical form of body (UTF-8, no media type
// handling) to dst. It checks MaxDepth but not MaxBytes.
func (o Options) Append(dst, body []byte) ([]byte, error) {
	m := o.mode()
	if m == ModeRaw {
		return append(dst, body...), nil
	}
	if m == ModeSchema && o.Schema == nil {
		return dst, fmt.Errorf("canon: schema mode without a schema")
	}
	d := getDoc()
	defer putDoc(d)
	if err := d.parse(body, o.maxDepth()); err != nil {
		return dst, err
	}
	switch m {
	case ModeJSON, ModeJCS:
		return d.appendValue(dst, 0, m == ModeJCS)
	case ModeSchema:
		return o.Schema.append(dst, d)
	}
	return dst, fmt.Errorf("canon: unknown mode %q", m)
}
