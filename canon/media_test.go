package canon

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"unicode/utf16"
)

func TestMediaTypes(t *testing.T) {
	t.Parallel()
	const body = `{"b":1,"a":2}`
	tests := []struct {
		mode        Mode
		contentType string
		wantType    string // "" with wantCode set: refused
		wantCode    string
	}{
		{ModeJSON, "application/json", "application/json", ""},
		{ModeJSON, "application/json; charset=UTF-8", "application/json", ""},
		{ModeJSON, `Application/JSON;Charset="utf-8"`, "application/json", ""},
		{ModeJSON, "application/problem+json", "application/problem+json", ""},
		{ModeJSON, "application/vnd.acme.order+json; version=2; charset=utf-8", "application/vnd.acme.order+json; version=2", ""},
		{ModeJSON, "application/json; b=2; a=1", "application/json; a=1; b=2", ""},
		{ModeJCS, "application/json", "application/json", ""},
		{ModeJSON, "text/plain", "", CodeUnsupportedMediaType},
		{ModeJSON, "text/json", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/jsonx", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/x-www-form-urlencoded", "", CodeUnsupportedMediaType},
		{ModeJCS, "text/plain", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/json; charset=latin1", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/json; charset=iso-8859-1", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/json; charset=utf-32", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/json; charset=utf8", "", CodeUnsupportedMediaType},
		{ModeJSON, "", "", CodeUnsupportedMediaType},
		{ModeJSON, "   ", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/json; charset", "", CodeUnsupportedMediaType},
		{ModeJSON, "application/", "", CodeUnsupportedMediaType},
		{ModeRaw, "", "", ""},
		{ModeRaw, "text/plain; charset=ISO-8859-1", "text/plain; charset=iso-8859-1", ""},
		{ModeRaw, "Application/JSON; Charset=UTF-8", "application/json; charset=utf-8", ""},
		{ModeRaw, "application/octet-stream", "application/octet-stream", ""},
		{ModeRaw, "text/plain; charset", "", CodeUnsupportedMediaType},
	}
	for _, tt := range tests {
		res, err := Canonicalize(tt.contentType, []byte(body), Options{Mode: tt.mode})
		if tt.wantCode != "" {
			wantCode(t, string(tt.mode)+" "+tt.contentType, err, tt.wantCode)
			continue
		}
		if err != nil {
			t.Errorf("%s %q: %v", tt.mode, tt.contentType, err)
			continue
		}
		if res.MediaType != tt.wantType {
			t.Errorf("%s %q: media type %q, want %q", tt.mode, tt.contentType, res.MediaType, tt.wantType)
		}
	}
}

func encodeUTF16(s string, big, bom bool) []byte {
	var order binary.AppendByteOrder = binary.LittleEndian
	if big {
		order = binary.BigEndian
	}
	var b []byte
	if bom {
		b = order.AppendUint16(b, 0xFEFF)
	}
	for _, u := range utf16.Encode([]rune(s)) {
		b = order.AppendUint16(b, u)
	}
	return b
}

func TestUTF16Bodies(t *testing.T) {
	t.Parallel()
	const doc = "{ \"z\": \"\U0001F600 \u00e9\", \"a\": [1, \"\u20ac\"], \"\u00e9\": true }"
	want, err := Options{}.Append(nil, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		charset  string
		big, bom bool
	}{
		{"utf-16", true, true},
		{"utf-16", false, true},
		{"utf-16", true, false}, // no BOM: big-endian
		{"UTF-16", false, true},
		{"utf-16le", false, false},
		{"utf-16le", false, true},
		{"UTF-16LE", false, false},
		{"utf-16be", true, false},
		{"utf-16be", true, true},
	}
	for _, tt := range tests {
		body := encodeUTF16(doc, tt.big, tt.bom)
		for _, mt := range []string{"application/json", "application/problem+json"} {
			res, err := Canonicalize(mt+"; charset="+tt.charset, body, Options{})
			if err != nil {
				t.Errorf("%s big=%v bom=%v: %v", tt.charset, tt.big, tt.bom, err)
				continue
			}
			if !bytes.Equal(res.Payload, want) || res.MediaType != mt {
				t.Errorf("%s big=%v bom=%v: %q %s, want %q %s", tt.charset, tt.big, tt.bom, res.MediaType, res.Payload, mt, want)
			}
		}
	}
}

func TestUTF16Refusals(t *testing.T) {
	t.Parallel()
	le := func(units ...uint16) []byte {
		var b []byte
		for _, u := range units {
			b = binary.LittleEndian.AppendUint16(b, u)
		}
		return b
	}
	tests := []struct {
		name, charset string
		body          []byte
	}{
		{"odd length", "utf-16le", append(encodeUTF16(`{"a":1}`, false, false), ' ')},
		{"odd length with BOM", "utf-16", append(encodeUTF16(`[]`, true, true), 0)},
		{"single byte", "utf-16be", []byte{'1'}},
		{"lone high surrogate", "utf-16le", le('"', 0xD800, '"')},
		{"lone low surrogate", "utf-16le", le('"', 0xDC00, '"')},
		{"high surrogate at end", "utf-16le", le('"', 'a', 0xD83D)},
		{"inverted pair", "utf-16le", le('"', 0xDE00, 0xD83D, '"')},
		{"high then high", "utf-16le", le('"', 0xD83D, 0xD83D, '"')},
		{"low then low", "utf-16le", le('"', 0xDC00, 0xDC00, '"')},
		{"high then non-surrogate above DFFF", "utf-16le", le('"', 0xD83D, 0xE000, '"')},
		{"BE BOM with utf-16le label", "utf-16le", append([]byte{0xFE, 0xFF}, encodeUTF16(`1`, false, false)...)},
		{"UTF-8 bytes declared utf-16", "utf-16", []byte(`{"a":1}x`)},
		{"invalid JSON after decoding", "utf-16be", encodeUTF16(`{"a":1,}`, true, false)},
		{"duplicate after decoding", "utf-16be", encodeUTF16(`{"a":1,"A":2}`, true, true)},
	}
	for _, tt := range tests {
		_, err := Canonicalize("application/json; charset="+tt.charset, tt.body, Options{})
		wantCode(t, tt.name, err, CodeInvalidJSON)
	}
}

// Proves threat:oversized-bodies (docs/threat-model.md).
func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	padded := func(n int) []byte { // a JSON string of exactly n bytes
		return []byte(`"` + strings.Repeat("x", n-2) + `"`)
	}
	for _, tt := range []struct {
		opt  Options
		size int
	}{
		{Options{}, DefaultMaxBytes},
		{Options{MaxBytes: 64}, 64},
		{Options{Mode: ModeRaw, MaxBytes: 10}, 10},
		{Options{Mode: ModeJCS, MaxBytes: 100}, 100},
	} {
		if _, err := Canonicalize("application/json", padded(tt.size), tt.opt); err != nil {
			t.Errorf("%+v, %d bytes: %v", tt.opt, tt.size, err)
		}
		_, err := Canonicalize("application/json", padded(tt.size+1), tt.opt)
		wantCode(t, "MaxBytes+1", err, CodeBodyTooLarge)
		// The limit holds before the media type is looked at.
		_, err = Canonicalize("text/plain", padded(tt.size+1), tt.opt)
		wantCode(t, "MaxBytes+1 text/plain", err, CodeBodyTooLarge)
	}
	// The limit counts bytes as received: a UTF-16 body of MaxBytes is fine
	// although it decodes to fewer bytes, one byte more is not.
	body := encodeUTF16(`"`+strings.Repeat("y", 30)+`"`, false, true) // 66 bytes
	if _, err := Canonicalize("application/json; charset=utf-16", body, Options{MaxBytes: len(body)}); err != nil {
		t.Errorf("UTF-16 at the limit: %v", err)
	}
	_, err := Canonicalize("application/json; charset=utf-16", body, Options{MaxBytes: len(body) - 1})
	wantCode(t, "UTF-16 over the limit", err, CodeBodyTooLarge)
	var ce *Error
	if errors.As(err, &ce) && ce.Offset != -1 {
		t.Errorf("BODY_TOO_LARGE offset %d, want -1", ce.Offset)
	}
}

func TestRawMode(t *testing.T) {
	t.Parallel()
	for _, body := range [][]byte{
		[]byte(`{"b":1,  "a":2}`),
		[]byte("{\"a\":1,\"a\":2}"),
		[]byte("\xff\xfe not json \x00"),
		{},
	} {
		res, err := Canonicalize("text/plain", body, Options{Mode: ModeRaw})
		if err != nil || !bytes.Equal(res.Payload, body) {
			t.Errorf("raw %q: %q, %v", body, res.Payload, err)
		}
		got, err := Options{Mode: ModeRaw}.Append(nil, body)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("raw Append %q: %q, %v", body, got, err)
		}
	}
	// Raw mode does not decode UTF-16 either: the bytes are hashed as sent.
	body := encodeUTF16(`{}`, false, true)
	res, err := Canonicalize("application/json; charset=utf-16", body, Options{Mode: ModeRaw})
	if err != nil || !bytes.Equal(res.Payload, body) || res.MediaType != "application/json; charset=utf-16" {
		t.Errorf("raw UTF-16: %q %q, %v", res.MediaType, res.Payload, err)
	}
}

// TestPayloadDoesNotAlias mutates the input after Canonicalize returns:
// the payload must not change, in any mode.
func TestPayloadDoesNotAlias(t *testing.T) {
	t.Parallel()
	schema := paymentsSchema()
	tests := []struct {
		opt  Options
		ct   string
		body string
	}{
		{Options{Mode: ModeRaw}, "application/json", `{"a":"xyz"}`},
		{Options{Mode: ModeRaw}, "", `x`},
		{Options{Mode: ModeJSON}, "application/json", `{"a":"xyz"}`},
		{Options{Mode: ModeJSON}, "application/json", `"plain string"`},
		{Options{Mode: ModeJSON}, "application/json", `12345`},
		{Options{Mode: ModeJCS}, "application/json", `{"a":"xyz"}`},
		{Options{Mode: ModeSchema, Schema: schema}, "application/json", `{"amount":"1.5","currency":"EUR","payee":"p"}`},
	}
	for _, tt := range tests {
		body := []byte(tt.body)
		res, err := Canonicalize(tt.ct, body, tt.opt)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.opt.Mode, tt.body, err)
		}
		before := bytes.Clone(res.Payload)
		for i := range body {
			body[i] = '#'
		}
		if !bytes.Equal(res.Payload, before) {
			t.Errorf("%s %s: payload changed to %q after the input was changed", tt.opt.Mode, tt.body, res.Payload)
		}
		// A second call must not hand back the same backing array either.
		res2, _ := Canonicalize(tt.ct, []byte(tt.body), tt.opt)
		if len(res2.Payload) > 0 && &res2.Payload[0] == &res.Payload[0] {
			t.Errorf("%s %s: two results share memory", tt.opt.Mode, tt.body)
		}
	}
}
