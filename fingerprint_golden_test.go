package idem_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
)

// fingerprintEncoding re-implements the documented fingerprint encoding:
// SHA-256 over the length-prefixed fields domain tag, method, target, then
// the number of header lines (4 bytes, big-endian) and each line
// length-prefixed, then media type, mode, schema revision and the raw
// 32-byte SHA-256 of the canonical payload.
func fingerprintEncoding(method, target string, headers []string, mediaType, mode, revision string, payload []byte) [32]byte {
	sum := sha256.Sum256(payload)
	var buf []byte
	field := func(b []byte) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
		buf = append(buf, b...)
	}
	field([]byte("http.idempotency.v1/fingerprint"))
	field([]byte(method))
	field([]byte(target))
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(headers)))
	for _, h := range headers {
		field([]byte(h))
	}
	field([]byte(mediaType))
	field([]byte(mode))
	field([]byte(revision))
	field(sum[:])
	return sha256.Sum256(buf)
}

func TestFingerprintGolden(t *testing.T) {
	t.Parallel()
	payments := paymentsSchema(t, "payments.v1")
	tests := []struct {
		name string
		r    fpReq
		// Expected parts, written out by hand.
		method, target string
		headers        []string
		mediaType      string
		mode           string
		revision       string
		payload        string
		// hex, when set, was computed outside Go (Python hashlib).
		hex string
	}{
		{
			name: "schema mode with query and header",
			r: fpMod(schema(payments), query("currency"), bindHdr("X-Api-Version"),
				setHdr("X-Api-Version", "2024-06-01"), contentType("application/json; charset=utf-8"),
				target("/v1/payments?currency=EUR&x=1"),
				body(`{"payee":"acct_1","amount":"12.5","currency":"EUR","memo":null}`)),
			method: "POST", target: "/v1/payments?currency=EUR",
			headers:   []string{"x-api-version: 2024-06-01"},
			mediaType: "application/json", mode: "schema", revision: "payments.v1",
			payload: `{"amount":"12.50","currency":"EUR","payee":"acct_1"}`,
			hex:     "5c2b2dad4ec2857761aa6d7e59b11c10b4102773f57214d47e4286534b58ce8f",
		},
		{
			name:   "json mode, empty path, no headers",
			r:      fpMod(method("PUT"), target(""), body(`{ "b": [true, null, "x"], "a": 1 }`)),
			method: "PUT", target: "/", headers: nil,
			mediaType: "application/json", mode: "json", revision: "",
			payload: `{"a":1,"b":[true,null,"x"]}`,
			hex:     "7acf4b4f7c4f5ab29664e885f12ee513b1aa0db9d3759c60dbc18684a5cb8e7e",
		},
		{
			name: "raw mode, two headers, one absent",
			r: fpMod(mode(canon.ModeRaw), bindHdr("X-Tenant-Plan", "X-Api-Version"),
				setHdr("X-Api-Version", "2"), contentType("text/plain; Charset=UTF-8"),
				target("/v1/a/%7e/b%2fc?q=1"), body("hello \x00 world")),
			method: "POST", target: "/v1/a/~/b%2Fc",
			headers:   []string{"x-api-version: 2", "x-tenant-plan"},
			mediaType: "text/plain; charset=utf-8", mode: "raw", revision: "",
			payload: "hello \x00 world",
		},
		{
			name:   "jcs mode",
			r:      fpMod(mode(canon.ModeJCS), method("PATCH"), contentType("application/merge-patch+json"), body(`{"b":1.50,"a":1e2}`)),
			method: "PATCH", target: "/v1/payments",
			mediaType: "application/merge-patch+json", mode: "jcs",
			payload: `{"a":100,"b":1.5}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, p := tt.r.mustFingerprint(t)
			if p.Method != tt.method || p.Target != tt.target || !slices.Equal(p.Headers, tt.headers) ||
				p.MediaType != tt.mediaType || p.Mode != tt.mode || p.SchemaRevision != tt.revision ||
				string(p.Payload) != tt.payload {
				t.Errorf("parts = %+v payload %q", p, p.Payload)
			}
			want := fingerprintEncoding(tt.method, tt.target, tt.headers, tt.mediaType, tt.mode, tt.revision, []byte(tt.payload))
			if f != idem.Fingerprint(want) {
				t.Errorf("fingerprint %s, want %s by the documented encoding", f, hex.EncodeToString(want[:]))
			}
			if tt.hex != "" && f.String() != tt.hex {
				t.Errorf("fingerprint %s, want pinned %s", f, tt.hex)
			}
		})
	}
}

// TestFingerprintDomainSeparation checks that a fingerprint is not a scope
// hash of the same bytes: the domain tags differ.
func TestFingerprintDomainSeparation(t *testing.T) {
	t.Parallel()
	f, p := fpBase().mustFingerprint(t)
	other := fingerprintEncoding(p.Method, p.Target, p.Headers, p.MediaType, p.Mode, p.SchemaRevision, p.Payload)
	if f != idem.Fingerprint(other) {
		t.Fatal("golden encoding mismatch")
	}
	swapped := lengthPrefixedSHA256([]byte("http.idempotency.v1/scope"), []byte(p.Method), []byte(p.Target))
	if f == idem.Fingerprint(swapped) {
		t.Error("fingerprint collides with a scope-tagged hash")
	}
}
