package idem_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"regexp"
	"testing"

	"github.com/idemkit/idem"
)

// lengthPrefixedSHA256 re-implements the documented field encoding
// independently of the package: SHA-256 over each field written as its
// length (4 bytes, big-endian) followed by its bytes. The first field is
// the domain tag.
func lengthPrefixedSHA256(fields ...[]byte) [32]byte {
	var buf []byte
	for _, f := range fields {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(f)))
		buf = append(buf, f...)
	}
	return sha256.Sum256(buf)
}

func mustParseKey(t testing.TB, v string) idem.Key {
	t.Helper()
	k, err := idem.ParseKey([]string{v}, idem.KeyPolicy{})
	if err != nil {
		t.Fatalf("ParseKey(%q): %v", v, err)
	}
	return k
}

type scopeInput struct {
	tenant, principal, operation, apiRevision, key string
}

func (in scopeInput) hash(t testing.TB) idem.ScopeHash {
	t.Helper()
	return idem.ScopeOf(idem.Identity{Tenant: in.tenant, Principal: in.principal},
		in.operation, in.apiRevision, mustParseKey(t, in.key))
}

var scopeBase = scopeInput{
	tenant:      "acme",
	principal:   "alice",
	operation:   "payments.create",
	apiRevision: "v1",
	key:         "0f8fad5b-d9cb-469f-a165-70867728950e",
}

// Proves threat:another-principal-outcome (docs/threat-model.md).
func TestScopeOfEachFieldMatters(t *testing.T) {
	t.Parallel()
	base := scopeBase.hash(t)
	tests := []struct {
		name   string
		change func(*scopeInput)
	}{
		{"tenant", func(s *scopeInput) { s.tenant = "acme2" }},
		{"tenant empty", func(s *scopeInput) { s.tenant = "" }},
		{"principal", func(s *scopeInput) { s.principal = "bob" }},
		{"principal empty", func(s *scopeInput) { s.principal = "" }},
		{"principal case", func(s *scopeInput) { s.principal = "Alice" }},
		{"operation", func(s *scopeInput) { s.operation = "payments.refund" }},
		{"operation empty", func(s *scopeInput) { s.operation = "" }},
		{"api revision", func(s *scopeInput) { s.apiRevision = "v2" }},
		{"api revision empty", func(s *scopeInput) { s.apiRevision = "" }},
		{"key", func(s *scopeInput) { s.key = "0f8fad5b-d9cb-469f-a165-70867728950f" }},
		{"key case", func(s *scopeInput) { s.key = "0F8FAD5B-D9CB-469F-A165-70867728950E" }},
		{"tenant and principal swapped", func(s *scopeInput) { s.tenant, s.principal = s.principal, s.tenant }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := scopeBase
			tt.change(&in)
			if in.hash(t) == base {
				t.Errorf("changing %s does not change the scope hash", tt.name)
			}
		})
	}
}

func TestScopeOfFieldBoundaries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b scopeInput
	}{
		{"tenant/principal",
			scopeInput{"ab", "c", "op", "v1", "k"},
			scopeInput{"a", "bc", "op", "v1", "k"}},
		{"principal/operation, one empty",
			scopeInput{"t", "x", "", "v1", "k"},
			scopeInput{"t", "", "x", "v1", "k"}},
		{"operation/revision",
			scopeInput{"t", "p", "payments.createv", "1", "k"},
			scopeInput{"t", "p", "payments.create", "v1", "k"}},
		{"revision/key",
			scopeInput{"t", "p", "op", "v1a", "b"},
			scopeInput{"t", "p", "op", "v1", "ab"}},
		{"tenant empty vs principal empty",
			scopeInput{"", "x", "op", "v1", "k"},
			scopeInput{"x", "", "op", "v1", "k"}},
		{"whole identity shifted into operation",
			scopeInput{"", "", "acmealicepay", "v1", "k"},
			scopeInput{"acme", "alice", "pay", "v1", "k"}},
		{"length byte lookalike",
			scopeInput{"a\x00\x00\x00\x01b", "", "op", "v1", "k"},
			scopeInput{"a", "b", "op", "v1", "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.a.hash(t) == tt.b.hash(t) {
				t.Errorf("%+v and %+v share a scope hash", tt.a, tt.b)
			}
		})
	}
}

func TestScopeOfDeterministic(t *testing.T) {
	t.Parallel()
	first := scopeBase.hash(t)
	for range 100 {
		if got := scopeBase.hash(t); got != first {
			t.Fatalf("ScopeOf is not deterministic: %s then %s", first, got)
		}
	}
	// A separately parsed key with the same text is the same key.
	k1 := mustParseKey(t, scopeBase.key)
	k2 := mustParseKey(t, `"`+scopeBase.key+`"`)
	id := idem.Identity{Tenant: scopeBase.tenant, Principal: scopeBase.principal}
	if idem.ScopeOf(id, scopeBase.operation, scopeBase.apiRevision, k1) !=
		idem.ScopeOf(id, scopeBase.operation, scopeBase.apiRevision, k2) {
		t.Error("the same key parsed twice gives different scopes")
	}
}

var lowerHex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestScopeHashString(t *testing.T) {
	t.Parallel()
	h := scopeBase.hash(t)
	s := h.String()
	if !lowerHex64.MatchString(s) {
		t.Fatalf("String() = %q, want 64 lower-case hex characters", s)
	}
	raw, err := hex.DecodeString(s)
	if err != nil || [32]byte(raw) != [32]byte(h) {
		t.Errorf("String() = %q does not encode the hash bytes", s)
	}
	var zero idem.ScopeHash
	if got := zero.String(); got != "0000000000000000000000000000000000000000000000000000000000000000" {
		t.Errorf("zero ScopeHash String() = %q", got)
	}
}

// TestScopeOfGolden pins the encoding as contract: SHA-256 over the
// length-prefixed domain tag "http.idempotency.v1/scope" and then tenant,
// principal, operation, API revision and key, each as a 4-byte big-endian
// length and its bytes.
func TestScopeOfGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in scopeInput // in.key is the key's text
		// field, when set, is the Idempotency-Key field value that
		// carries in.key; otherwise in.key itself is sent.
		field string
		// hex, when set, was computed outside Go (Python hashlib) from
		// the same encoding.
		hex string
	}{
		{scopeBase, "", "65d0cbfd9e07a231154e7bbeee5dbcfc3c909b4622f49e8d1fa188ed809bbc80"},
		{scopeInput{"", "", "", "", "k"}, "", "15d9199d023cb3ac3edb759831815baa47402de6151d905db35aee7a3d456996"},
		{scopeInput{"t\x00", "ü", "op", "2024-06-01", `a"b\c`}, `"a\"b\\c"`, ""},
		{scopeInput{"acme", "alice", "payments.create", "v1", "abc"}, ` "abc"	`, ""},
	}
	for _, tt := range tests {
		field := tt.field
		if field == "" {
			field = tt.in.key
		}
		got := idem.ScopeOf(idem.Identity{Tenant: tt.in.tenant, Principal: tt.in.principal},
			tt.in.operation, tt.in.apiRevision, mustParseKey(t, field))
		want := lengthPrefixedSHA256(
			[]byte("http.idempotency.v1/scope"),
			[]byte(tt.in.tenant),
			[]byte(tt.in.principal),
			[]byte(tt.in.operation),
			[]byte(tt.in.apiRevision),
			[]byte(tt.in.key),
		)
		if got != idem.ScopeHash(want) {
			t.Errorf("ScopeOf(%+v) = %s, want %s", tt.in, got, hex.EncodeToString(want[:]))
		}
		if tt.hex != "" && got.String() != tt.hex {
			t.Errorf("ScopeOf(%+v) = %s, want pinned %s", tt.in, got, tt.hex)
		}
	}
	if idem.ContractVersion != "http.idempotency.v1" {
		t.Errorf("ContractVersion = %q", idem.ContractVersion)
	}
}
