package idem_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"unicode/utf16"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
)

// paymentsSchema is the reference service's payments.v1 schema (SPEC R).
func paymentsSchema(t testing.TB, revision string) *canon.Schema {
	t.Helper()
	s := &canon.Schema{Revision: revision, Fields: map[string]*canon.Field{
		"amount":   {Type: canon.TypeDecimal, Scale: 2, Required: true, Positive: true},
		"currency": {Type: canon.TypeString, Pattern: "[A-Z]{3}", Required: true},
		"payee":    {Type: canon.TypeString, Required: true},
		"memo":     {Type: canon.TypeString, Null: canon.NullAbsent},
	}}
	if err := s.Validate(); err != nil {
		t.Fatalf("payments schema: %v", err)
	}
	return s
}

// fpReq is one request to fingerprint.
type fpReq struct {
	binding idem.Binding
	method  string
	url     string
	header  http.Header // Content-Type included
	body    []byte
}

func (r fpReq) fingerprint(t testing.TB) (idem.Fingerprint, idem.FingerprintParts, error) {
	t.Helper()
	u, err := url.Parse(r.url)
	if err != nil {
		t.Fatalf("url.Parse(%q): %v", r.url, err)
	}
	return r.binding.Fingerprint(r.method, u, r.header, r.body)
}

func (r fpReq) mustFingerprint(t testing.TB) (idem.Fingerprint, idem.FingerprintParts) {
	t.Helper()
	f, p, err := r.fingerprint(t)
	if err != nil {
		t.Fatalf("Fingerprint(%s %s, %q): %v", r.method, r.url, r.body, err)
	}
	return f, p
}

// fpBase is a JSON-mode payment request with no bound query or headers.
func fpBase() fpReq {
	return fpReq{
		method: "POST",
		url:    "/v1/payments",
		header: http.Header{"Content-Type": {"application/json"}},
		body:   []byte(`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`),
	}
}

// fpMod returns fpBase changed by each function in turn.
func fpMod(mods ...func(*fpReq)) fpReq {
	r := fpBase()
	r.header = r.header.Clone()
	for _, m := range mods {
		m(&r)
	}
	return r
}

func body(s string) func(*fpReq)       { return func(r *fpReq) { r.body = []byte(s) } }
func target(s string) func(*fpReq)     { return func(r *fpReq) { r.url = s } }
func method(s string) func(*fpReq)     { return func(r *fpReq) { r.method = s } }
func mode(m canon.Mode) func(*fpReq)   { return func(r *fpReq) { r.binding.Canon.Mode = m } }
func query(q ...string) func(*fpReq)   { return func(r *fpReq) { r.binding.Query = q } }
func bindHdr(h ...string) func(*fpReq) { return func(r *fpReq) { r.binding.Headers = h } }
func setHdr(name string, vs ...string) func(*fpReq) {
	return func(r *fpReq) { r.header[http.CanonicalHeaderKey(name)] = vs }
}
func delHdr(name string) func(*fpReq) { return func(r *fpReq) { r.header.Del(name) } }
func addHdr(name, value string) func(*fpReq) {
	return func(r *fpReq) { r.header.Add(name, value) }
}
func contentType(ct string) func(*fpReq) {
	return func(r *fpReq) { r.header.Set("Content-Type", ct) }
}
func schema(s *canon.Schema) func(*fpReq) {
	return func(r *fpReq) { r.binding.Canon.Mode, r.binding.Canon.Schema = canon.ModeSchema, s }
}

func utf16Body(s string, bigEndian, bom bool) []byte {
	var out []byte
	if bom {
		if bigEndian {
			out = append(out, 0xFE, 0xFF)
		} else {
			out = append(out, 0xFF, 0xFE)
		}
	}
	for _, u := range utf16.Encode([]rune(s)) {
		if bigEndian {
			out = binary.BigEndian.AppendUint16(out, u)
		} else {
			out = binary.LittleEndian.AppendUint16(out, u)
		}
	}
	return out
}

// Proves threat:same-key-different-request (docs/threat-model.md).
func TestFingerprintEquivalence(t *testing.T) {
	t.Parallel()
	payments := paymentsSchema(t, "payments.v1")
	payments2 := paymentsSchema(t, "payments.v2")
	const utf16JSON = `{"amount":"12.50","currency":"EUR","payee":"acct_é😀"}`
	tests := []struct {
		name string
		a, b fpReq
		same bool
	}{
		{"identical requests", fpBase(), fpBase(), true},

		// Payload, json mode.
		{"member order and whitespace",
			fpMod(body(`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`)),
			fpMod(body(" {\n\t\"payee\" : \"acct_1\" ,\r\n \"currency\":\"EUR\", \"amount\" :\"12.50\"}\n")), true},
		{"nested member order",
			fpMod(body(`{"a":{"x":1,"y":[{"p":1,"q":2}]}}`)),
			fpMod(body(`{"a":{"y":[{"q":2,"p":1}],"x":1}}`)), true},
		{"string escape forms", fpMod(body(`{"a":"A/é"}`)), fpMod(body(`{"a":"\u0041\/\u00e9"}`)), true},
		{"changed amount",
			fpMod(body(`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`)),
			fpMod(body(`{"amount":"12.51","currency":"EUR","payee":"acct_1"}`)), false},
		{"array order kept", fpMod(body(`{"a":[1,2]}`)), fpMod(body(`{"a":[2,1]}`)), false},
		{"json mode keeps number lexically", fpMod(body(`{"a":10.0}`)), fpMod(body(`{"a":10}`)), false},
		{"json mode exponent kept", fpMod(body(`{"a":1e1}`)), fpMod(body(`{"a":10}`)), false},
		{"json mode string vs number", fpMod(body(`{"a":"10"}`)), fpMod(body(`{"a":10}`)), false},
		{"json mode null vs absent", fpMod(body(`{"a":1,"b":null}`)), fpMod(body(`{"a":1}`)), false},

		// jcs mode.
		{"jcs mode number form", fpMod(mode(canon.ModeJCS), body(`{"a":10.0}`)), fpMod(mode(canon.ModeJCS), body(`{"a":10}`)), true},
		{"jcs mode exponent", fpMod(mode(canon.ModeJCS), body(`{"a":1E1}`)), fpMod(mode(canon.ModeJCS), body(`{"a":10}`)), true},
		{"jcs mode member order", fpMod(mode(canon.ModeJCS), body(`{"b":1,"a":2}`)), fpMod(mode(canon.ModeJCS), body(`{ "a":2, "b":1 }`)), true},
		{"jcs mode value change", fpMod(mode(canon.ModeJCS), body(`{"a":10}`)), fpMod(mode(canon.ModeJCS), body(`{"a":11}`)), false},

		// schema mode.
		{"schema amount scale",
			fpMod(schema(payments), body(`{"amount":"12.5","currency":"EUR","payee":"acct_1"}`)),
			fpMod(schema(payments), body(`{"payee":"acct_1","currency":"EUR","amount":"12.50"}`)), true},
		{"schema integral amount",
			fpMod(schema(payments), body(`{"amount":"12","currency":"EUR","payee":"acct_1"}`)),
			fpMod(schema(payments), body(`{"amount":"12.00","currency":"EUR","payee":"acct_1"}`)), true},
		{"schema null memo is absent",
			fpMod(schema(payments), body(`{"amount":"1.00","currency":"EUR","payee":"p","memo":null}`)),
			fpMod(schema(payments), body(`{"amount":"1.00","currency":"EUR","payee":"p"}`)), true},
		{"schema memo present vs absent",
			fpMod(schema(payments), body(`{"amount":"1.00","currency":"EUR","payee":"p","memo":"x"}`)),
			fpMod(schema(payments), body(`{"amount":"1.00","currency":"EUR","payee":"p"}`)), false},
		{"schema changed amount",
			fpMod(schema(payments), body(`{"amount":"12.5","currency":"EUR","payee":"acct_1"}`)),
			fpMod(schema(payments), body(`{"amount":"12.51","currency":"EUR","payee":"acct_1"}`)), false},
		{"schema changed currency",
			fpMod(schema(payments), body(`{"amount":"1","currency":"EUR","payee":"acct_1"}`)),
			fpMod(schema(payments), body(`{"amount":"1","currency":"USD","payee":"acct_1"}`)), false},
		{"schema revision bound",
			fpMod(schema(payments), body(`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`)),
			fpMod(schema(payments2), body(`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`)), false},
		{"schema ignored outside schema mode",
			fpMod(),
			fpMod(func(r *fpReq) { r.binding.Canon.Schema = payments2 }), true},

		// raw mode.
		{"raw identical", fpMod(mode(canon.ModeRaw)), fpMod(mode(canon.ModeRaw)), true},
		{"raw byte change", fpMod(mode(canon.ModeRaw), body("abc")), fpMod(mode(canon.ModeRaw), body("abd")), false},
		{"raw whitespace", fpMod(mode(canon.ModeRaw), body(`{"a":1}`)), fpMod(mode(canon.ModeRaw), body(`{"a": 1}`)), false},
		{"raw member order", fpMod(mode(canon.ModeRaw), body(`{"a":1,"b":2}`)), fpMod(mode(canon.ModeRaw), body(`{"b":2,"a":1}`)), false},
		{"raw empty vs absent body", fpMod(mode(canon.ModeRaw), body("")), fpMod(mode(canon.ModeRaw), func(r *fpReq) { r.body = nil }), true},

		// The mode itself is bound.
		{"json vs jcs same canonical bytes", fpMod(body(`{"a":"x"}`)), fpMod(mode(canon.ModeJCS), body(`{"a":"x"}`)), false},
		{"json vs raw same bytes", fpMod(body(`{"a":"x"}`)), fpMod(mode(canon.ModeRaw), body(`{"a":"x"}`)), false},
		{"zero mode is json", fpMod(), fpMod(mode(canon.ModeJSON)), true},

		// Query.
		{"undeclared query ignored", fpMod(target("/v1/payments?trace=1")), fpMod(target("/v1/payments?trace=2")), true},
		{"undeclared query vs none", fpMod(target("/v1/payments?trace=1")), fpMod(target("/v1/payments")), true},
		{"non-significant query ignored",
			fpMod(query("currency"), target("/v1/payments?currency=EUR&trace=1")),
			fpMod(query("currency"), target("/v1/payments?trace=2&currency=EUR")), true},
		{"significant query bound",
			fpMod(query("currency"), target("/v1/payments?currency=EUR")),
			fpMod(query("currency"), target("/v1/payments?currency=USD")), false},
		{"significant query absent vs empty",
			fpMod(query("currency"), target("/v1/payments")),
			fpMod(query("currency"), target("/v1/payments?currency=")), false},
		{"significant query name case-sensitive",
			fpMod(query("currency"), target("/v1/payments?Currency=EUR")),
			fpMod(query("currency"), target("/v1/payments")), true},
		{"kept query order irrelevant",
			fpMod(query("a", "b"), target("/v1/payments?a=1&b=2")),
			fpMod(query("a", "b"), target("/v1/payments?b=2&a=1")), true},
		{"declared query order irrelevant",
			fpMod(query("a", "b"), target("/v1/payments?a=1&b=2")),
			fpMod(query("b", "a"), target("/v1/payments?a=1&b=2")), true},
		{"repeated query value order matters",
			fpMod(query("a"), target("/v1/payments?a=1&a=2")),
			fpMod(query("a"), target("/v1/payments?a=2&a=1")), false},
		{"query value encoding forms",
			fpMod(query("a"), target("/v1/payments?a=x%20y%2Fz")),
			fpMod(query("a"), target("/v1/payments?a=x+y/z")), true},
		{"query value vs two values",
			fpMod(query("a"), target("/v1/payments?a=1%262")),
			fpMod(query("a"), target("/v1/payments?a=1&a=2")), false},

		// Headers.
		{"declared header bound",
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "2024-01-01")),
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "2024-06-01")), false},
		{"undeclared header ignored",
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "1"), setHdr("X-Request-Id", "a")),
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "1"), setHdr("X-Request-Id", "b")), true},
		{"header undeclared entirely",
			fpMod(setHdr("X-Api-Version", "1")),
			fpMod(setHdr("X-Api-Version", "2")), true},
		{"declaration case-insensitive",
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "1")),
			fpMod(bindHdr("x-API-version"), setHdr("X-Api-Version", "1")), true},
		{"declared twice is once",
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "1")),
			fpMod(bindHdr("X-Api-Version", "x-api-version"), setHdr("X-Api-Version", "1")), true},
		{"declaration order irrelevant",
			fpMod(bindHdr("X-A", "X-B"), setHdr("X-A", "1"), setHdr("X-B", "2")),
			fpMod(bindHdr("X-B", "X-A"), setHdr("X-A", "1"), setHdr("X-B", "2")), true},
		{"values not swappable between headers",
			fpMod(bindHdr("X-A", "X-B"), setHdr("X-A", "1"), setHdr("X-B", "2")),
			fpMod(bindHdr("X-A", "X-B"), setHdr("X-A", "2"), setHdr("X-B", "1")), false},
		{"absent vs empty declared header",
			fpMod(bindHdr("X-Api-Version")),
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "")), false},
		{"header value OWS trimmed",
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", " \t1 ")),
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "1")), true},
		{"header value case kept",
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "a")),
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "A")), false},
		{"header field lines order matters",
			fpMod(bindHdr("X-A"), setHdr("X-A", "1", "2")),
			fpMod(bindHdr("X-A"), setHdr("X-A", "2", "1")), false},
		{"header field lines combine as a list",
			fpMod(bindHdr("X-A"), setHdr("X-A", "1", "2")),
			fpMod(bindHdr("X-A"), setHdr("X-A", "1, 2")), true},
		{"binding a header changes the fingerprint",
			fpMod(setHdr("X-Api-Version", "1")),
			fpMod(bindHdr("X-Api-Version"), setHdr("X-Api-Version", "1")), false},

		// Method and path.
		{"method", fpMod(method("POST")), fpMod(method("PUT")), false},
		{"path", fpMod(target("/v1/payments/a")), fpMod(target("/v1/payments/b")), false},
		{"path case", fpMod(target("/v1/payments/a")), fpMod(target("/v1/payments/A")), false},
		{"path trailing slash", fpMod(target("/v1/payments")), fpMod(target("/v1/payments/")), false},
		{"path unreserved percent-encoding", fpMod(target("/v1/payments/%7Eabc")), fpMod(target("/v1/payments/~abc")), true},
		{"path lower-case hex", fpMod(target("/v1/payments/%c3%a9")), fpMod(target("/v1/payments/%C3%A9")), true},
		{"path dot segment", fpMod(target("/v1/./payments")), fpMod(target("/v1/payments")), true},
		{"path dot-dot segment", fpMod(target("/v1/x/../payments")), fpMod(target("/v1/payments")), true},
		{"path encoded slash", fpMod(target("/v1/payments/a%2fb")), fpMod(target("/v1/payments/a/b")), false},
		{"path encoded slash case", fpMod(target("/v1/payments/a%2fb")), fpMod(target("/v1/payments/a%2Fb")), true},
		{"absolute URL", fpMod(target("https://api.example.com/v1/payments?x=1")), fpMod(target("/v1/payments")), true},

		// Media type.
		{"charset utf-8 dropped", fpMod(contentType("application/json; charset=utf-8")), fpMod(contentType("application/json")), true},
		{"media type case", fpMod(contentType("Application/JSON")), fpMod(contentType("application/json")), true},
		{"charset case", fpMod(contentType("application/json;charset=UTF-8")), fpMod(contentType("APPLICATION/json")), true},
		{"+json media type bound", fpMod(contentType("application/merge-patch+json")), fpMod(contentType("application/json")), false},
		{"raw mode keeps charset", fpMod(mode(canon.ModeRaw), contentType("text/plain; charset=utf-8")), fpMod(mode(canon.ModeRaw), contentType("text/plain")), false},
		{"raw mode media type bound", fpMod(mode(canon.ModeRaw), contentType("text/plain")), fpMod(mode(canon.ModeRaw), contentType("application/octet-stream")), false},

		// UTF-16.
		{"utf-16 with LE BOM",
			fpMod(contentType("application/json; charset=utf-16"), func(r *fpReq) { r.body = utf16Body(utf16JSON, false, true) }),
			fpMod(body(utf16JSON)), true},
		{"utf-16 with BE BOM",
			fpMod(contentType("application/json; charset=utf-16"), func(r *fpReq) { r.body = utf16Body(utf16JSON, true, true) }),
			fpMod(body(utf16JSON)), true},
		{"utf-16 without BOM is big-endian",
			fpMod(contentType("application/json; charset=utf-16"), func(r *fpReq) { r.body = utf16Body(utf16JSON, true, false) }),
			fpMod(body(utf16JSON)), true},
		{"utf-16le without BOM",
			fpMod(contentType("application/json; charset=UTF-16LE"), func(r *fpReq) { r.body = utf16Body(utf16JSON, false, false) }),
			fpMod(body(utf16JSON)), true},
		{"utf-16 in schema mode",
			fpMod(schema(payments), contentType("application/json; charset=utf-16"), func(r *fpReq) { r.body = utf16Body(`{"amount":"12.5","currency":"EUR","payee":"p"}`, false, true) }),
			fpMod(schema(payments), body(`{"amount":"12.50","currency":"EUR","payee":"p"}`)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fa, pa := tt.a.mustFingerprint(t)
			fb, pb := tt.b.mustFingerprint(t)
			if (fa == fb) != tt.same {
				t.Errorf("same fingerprint = %v, want %v\n a: %+v\n b: %+v", fa == fb, tt.same, pa, pb)
			}
		})
	}
}

func TestFingerprintParts(t *testing.T) {
	t.Parallel()
	payments := paymentsSchema(t, "payments.v1")
	r := fpMod(
		schema(payments),
		query("currency"),
		bindHdr("X-Api-Version"),
		setHdr("X-Api-Version", "2024-06-01"),
		setHdr("X-Request-Id", "abc"),
		contentType("application/json; charset=utf-8"),
		target("/v1/./payments?trace=1&currency=EUR"),
		body(`{"payee":"acct_1","currency":"EUR","amount":"12.5","memo":null}`),
	)
	f, p := r.mustFingerprint(t)
	want := idem.FingerprintParts{
		Method:         "POST",
		Target:         "/v1/payments?currency=EUR",
		Headers:        []string{"x-api-version: 2024-06-01"},
		MediaType:      "application/json",
		Mode:           "schema",
		SchemaRevision: "payments.v1",
		Payload:        []byte(`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`),
	}
	sum := sha256.Sum256(want.Payload)
	want.PayloadSHA256 = hex.EncodeToString(sum[:])
	if p.Method != want.Method || p.Target != want.Target || !slices.Equal(p.Headers, want.Headers) ||
		p.MediaType != want.MediaType || p.Mode != want.Mode || p.SchemaRevision != want.SchemaRevision ||
		!bytes.Equal(p.Payload, want.Payload) || p.PayloadSHA256 != want.PayloadSHA256 {
		t.Errorf("parts = %+v (payload %s)\nwant    %+v (payload %s)", p, p.Payload, want, want.Payload)
	}
	if !lowerHex64.MatchString(f.String()) {
		t.Errorf("Fingerprint.String() = %q, want 64 lower-case hex characters", f)
	}

	// SchemaRevision is empty outside schema mode even when a schema is set.
	r.binding.Canon.Mode = canon.ModeJSON
	r.body = []byte(`{"a":1}`)
	_, p = r.mustFingerprint(t)
	if p.Mode != "json" || p.SchemaRevision != "" {
		t.Errorf("json mode: Mode %q SchemaRevision %q, want json and empty", p.Mode, p.SchemaRevision)
	}
	// The zero Binding reports mode json, binds no headers.
	_, p = fpBase().mustFingerprint(t)
	if p.Mode != "json" || len(p.Headers) != 0 || p.Target != "/v1/payments" {
		t.Errorf("zero binding: %+v", p)
	}
}

// TestFingerprintPayloadSHA256 checks that PayloadSHA256 is the hex SHA-256
// of Payload in every mode, and that Payload does not alias the body.
func TestFingerprintPayloadSHA256(t *testing.T) {
	t.Parallel()
	for _, r := range []fpReq{
		fpMod(),
		fpMod(body(`{ "b" : [1, 2.50, "x\u0041"], "a" : {"z":null,"y":true} }`)),
		fpMod(mode(canon.ModeJCS), body(`{"b":1.50,"a":1e2}`)),
		fpMod(mode(canon.ModeRaw), body("raw\x00bytes")),
		fpMod(schema(paymentsSchema(t, "payments.v1")), body(`{"amount":"1","currency":"EUR","payee":"p"}`)),
	} {
		orig := bytes.Clone(r.body)
		_, p := r.mustFingerprint(t)
		sum := sha256.Sum256(p.Payload)
		if p.PayloadSHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: PayloadSHA256 %s is not the SHA-256 of Payload %q", r.body, p.PayloadSHA256, p.Payload)
		}
		if len(p.Payload) > 0 && len(r.body) > 0 {
			p.Payload[0] ^= 0xFF
			if !bytes.Equal(r.body, orig) {
				t.Errorf("%s: Payload aliases the request body", orig)
			}
		}
	}
}

// TestFingerprintBoundHeaderOrder pins the order of bound header lines:
// sorted by lower-cased name, whether or not each header is present.
func TestFingerprintBoundHeaderOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    fpReq
		want []string
	}{
		{"both present, one name a prefix of the other",
			fpMod(bindHdr("X-A-B", "X-A"), setHdr("X-A", "1"), setHdr("X-A-B", "2")),
			[]string{"x-a: 1", "x-a-b: 2"}},
		{"prefix name absent",
			fpMod(bindHdr("X-A-B", "X-A"), setHdr("X-A-B", "2")),
			[]string{"x-a", "x-a-b: 2"}},
		{"longer name absent",
			fpMod(bindHdr("X-A-B", "X-A"), setHdr("X-A", "1")),
			[]string{"x-a: 1", "x-a-b"}},
		{"three names",
			fpMod(bindHdr("X-C", "x-b", "X-A"), setHdr("X-B", "b"), setHdr("X-C", "c")),
			[]string{"x-a", "x-b: b", "x-c: c"}},
		{"multiple lines joined",
			fpMod(bindHdr("X-A"), setHdr("X-A", " 1", "2 ")),
			[]string{"x-a: 1, 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, p := tt.r.mustFingerprint(t)
			if !slices.Equal(p.Headers, tt.want) {
				t.Errorf("Headers = %q, want %q", p.Headers, tt.want)
			}
		})
	}
}

// Proves threat:header-smuggling (docs/threat-model.md).
func TestFingerprintErrors(t *testing.T) {
	t.Parallel()
	payments := paymentsSchema(t, "payments.v1")
	tests := []struct {
		name string
		r    fpReq
		want idem.Code
	}{
		{"text/plain", fpMod(contentType("text/plain")), idem.CodeUnsupportedMediaType},
		{"missing content type", fpMod(delHdr("Content-Type")), idem.CodeUnsupportedMediaType},
		{"malformed content type", fpMod(contentType("application/json; charset")), idem.CodeUnsupportedMediaType},
		{"latin-1 charset", fpMod(contentType("application/json; charset=iso-8859-1")), idem.CodeUnsupportedMediaType},
		{"json mode refuses xml", fpMod(contentType("application/xml")), idem.CodeUnsupportedMediaType},
		{"two Content-Type lines", fpMod(addHdr("Content-Type", "text/plain")), idem.CodeUnsupportedMediaType},
		{"two equal Content-Type lines", fpMod(addHdr("Content-Type", "application/json")), idem.CodeUnsupportedMediaType},
		{"raw mode, two Content-Type lines", fpMod(mode(canon.ModeRaw), addHdr("Content-Type", "text/plain")), idem.CodeUnsupportedMediaType},
		{"schema mode refuses text", fpMod(schema(payments), contentType("text/plain")), idem.CodeUnsupportedMediaType},
		{"invalid JSON", fpMod(body(`{"amount":`)), idem.CodeInvalidJSON},
		{"empty JSON body", fpMod(body("")), idem.CodeInvalidJSON},
		{"trailing garbage", fpMod(body(`{"a":1}x`)), idem.CodeInvalidJSON},
		{"duplicate member", fpMod(body(`{"a":1,"a":2}`)), idem.CodeInvalidJSON},
		{"members differing in case", fpMod(body(`{"a":1,"A":2}`)), idem.CodeInvalidJSON},
		{"NaN", fpMod(body(`{"a":NaN}`)), idem.CodeInvalidJSON},
		{"number overflow", fpMod(body(`{"a":1e400}`)), idem.CodeInvalidJSON},
		{"invalid UTF-8", fpMod(body("{\"a\":\"\xff\"}")), idem.CodeInvalidJSON},
		{"lone surrogate", fpMod(body(`{"a":"\ud800"}`)), idem.CodeInvalidJSON},
		{"odd utf-16 body", fpMod(contentType("application/json; charset=utf-16"), body("{}x")), idem.CodeInvalidJSON},
		{"too deep", fpMod(func(r *fpReq) { r.binding.Canon.MaxDepth = 3 }, body(`{"a":{"b":{"c":{}}}}`)), idem.CodeInvalidJSON},
		{"schema unknown member", fpMod(schema(payments), body(`{"amount":"1","currency":"EUR","payee":"p","x":1}`)), idem.CodeSchemaViolation},
		{"schema bad currency", fpMod(schema(payments), body(`{"amount":"1","currency":"eur","payee":"p"}`)), idem.CodeSchemaViolation},
		{"schema scale too large", fpMod(schema(payments), body(`{"amount":"12.505","currency":"EUR","payee":"p"}`)), idem.CodeSchemaViolation},
		{"schema amount zero", fpMod(schema(payments), body(`{"amount":"0","currency":"EUR","payee":"p"}`)), idem.CodeSchemaViolation},
		{"schema amount negative", fpMod(schema(payments), body(`{"amount":"-1","currency":"EUR","payee":"p"}`)), idem.CodeSchemaViolation},
		{"schema amount as number", fpMod(schema(payments), body(`{"amount":12.5,"currency":"EUR","payee":"p"}`)), idem.CodeSchemaViolation},
		{"schema payee missing", fpMod(schema(payments), body(`{"amount":"1","currency":"EUR"}`)), idem.CodeSchemaViolation},
		{"body over limit", fpMod(func(r *fpReq) { r.binding.Canon.MaxBytes = 16 }, body(`{"a":"0123456789"}`)), idem.CodeBodyTooLarge},
		{"raw body over limit", fpMod(mode(canon.ModeRaw), func(r *fpReq) { r.binding.Canon.MaxBytes = 4 }, body("12345")), idem.CodeBodyTooLarge},
		{"over limit before media type check", fpMod(contentType("text/plain"), func(r *fpReq) { r.binding.Canon.MaxBytes = 4 }, body("12345")), idem.CodeBodyTooLarge},
		{"over default limit", fpMod(mode(canon.ModeRaw), func(r *fpReq) { r.body = make([]byte, canon.DefaultMaxBytes+1) }), idem.CodeBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, _, err := tt.r.fingerprint(t)
			if err == nil {
				t.Fatalf("Fingerprint succeeded, want %s", tt.want)
			}
			if got := idem.CodeOf(err); got != tt.want {
				t.Errorf("CodeOf(%v) = %q, want %q", err, got, tt.want)
			}
			var ce *canon.Error
			if !errors.As(err, &ce) {
				t.Errorf("payload refusal %T is not a *canon.Error", err)
			}
			if f != (idem.Fingerprint{}) {
				t.Errorf("refused request has a fingerprint %s", f)
			}
		})
	}
}

func TestFingerprintLimitBoundary(t *testing.T) {
	t.Parallel()
	b := `{"a":"012345678"}` // 17 bytes
	for _, tt := range []struct {
		max  int
		want idem.Code
	}{{17, ""}, {18, ""}, {16, idem.CodeBodyTooLarge}} {
		r := fpMod(func(r *fpReq) { r.binding.Canon.MaxBytes = tt.max }, body(b))
		_, _, err := r.fingerprint(t)
		if got := idem.CodeOf(err); got != tt.want || (tt.want == "") != (err == nil) {
			t.Errorf("MaxBytes %d, %d-byte body: err %v, want code %q", tt.max, len(b), err, tt.want)
		}
	}
}
