package registry_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// TestTenantHash: the hash is SHA-256 over "idem.tenant.v1", a NUL and
// the tenant, computed here independently; tenants that differ only by
// where a NUL falls, and the empty tenant, get distinct hashes.
func TestTenantHash(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"", "acme", "a\x00b", "\xff", strings.Repeat("x", 1<<16)} {
		if got, want := registry.TenantHash(tenant), sha256.Sum256([]byte("idem.tenant.v1\x00"+tenant)); got != want {
			t.Errorf("TenantHash(%.20q) = %x, want %x", tenant, got, want)
		}
	}
	seen := map[[32]byte]string{}
	for _, tenant := range []string{"", "\x00", "a", "a\x00", "\x00a"} {
		h := registry.TenantHash(tenant)
		if other, ok := seen[h]; ok {
			t.Errorf("TenantHash(%q) == TenantHash(%q)", tenant, other)
		}
		seen[h] = tenant
	}
}

// sampleDump is a small dump with one operation and a row of each kind.
func sampleDump() registry.TenantDump {
	h := registry.TenantHash("acme")
	at := time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.FixedZone("x", 3600))
	status, media, key := int64(201), "text/plain", "k1"
	rec := registry.TenantRecord{Scope: bytes.Repeat([]byte{1}, 32), OperationID: "op_1", Operation: "pay",
		Owner: bytes.Repeat([]byte{2}, 32), Fingerprint: bytes.Repeat([]byte{3}, 32), Contract: "c", State: "SUCCEEDED",
		OwnerGen: 1, LeaseUntil: at, ExpiresAt: at, CreatedAt: at, UpdatedAt: at, RespStatus: &status,
		RespMediaType: &media, RespLocation: &media, RespETag: &media, RespBody: []byte("sealed\x00"),
		RespDigest: bytes.Repeat([]byte{4}, 32), RespKey: &key, TenantHash: h[:]}
	return registry.TenantDump{TenantHash: h, Operations: []registry.TenantOperation{{
		Record:          rec,
		Effects:         []registry.TenantEffect{{OperationID: "op_1", Name: "transfer", DownstreamKey: "dk", OwnerGen: 1, CreatedAt: at, UpdatedAt: at}},
		Lookups:         []registry.TenantLookup{{OperationID: "op_1", Effect: "transfer", DownstreamKey: "dk", Answer: "executed", Actor: "a", At: at}},
		Reconciliations: []registry.TenantReconciliation{{OperationID: "op_1", Outcome: "SUCCEEDED", Method: "provider", Actor: "a", Evidence: "e", CreatedAt: at}},
		Outbox:          []registry.TenantOutbox{{MessageID: "op_1/0", OperationID: "op_1", Topic: "t", Payload: []byte{0xff}, CreatedAt: at}},
	}}}
}

// TestTenantStreamRoundTrip: what WriteTenantStream writes,
// ReadTenantStream reads back as the same dump (times at microseconds,
// UTC), and writing that again gives the same bytes; a changed byte
// anywhere is refused (ErrTenantStream).
// threat:tenant-copy-altered
func TestTenantStreamRoundTrip(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	counts, err := registry.WriteTenantStream(&out, sampleDump())
	if err != nil || counts != (registry.TenantCounts{Records: 1, Effects: 1, Outbox: 1}) {
		t.Fatalf("WriteTenantStream: %+v %v", counts, err)
	}
	d, err := registry.ReadTenantStream(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatalf("ReadTenantStream: %v", err)
	}
	if got := d.Operations[0].Record.CreatedAt; got.Location() != time.UTC || got.Nanosecond() != 123456000 {
		t.Errorf("read back created_at %v, want UTC at microseconds", got)
	}
	var again bytes.Buffer
	if _, err := registry.WriteTenantStream(&again, d); err != nil || !bytes.Equal(again.Bytes(), out.Bytes()) {
		t.Errorf("writing the read dump again differs (%v):\n%s\n%s", err, again.Bytes(), out.Bytes())
	}
	stream := out.Bytes()
	for i := range stream {
		if stream[i] == '\n' {
			continue
		}
		bad := bytes.Clone(stream)
		bad[i] ^= 0x01
		if _, err := registry.ReadTenantStream(bytes.NewReader(bad)); !errors.Is(err, registry.ErrTenantStream) {
			t.Fatalf("byte %d changed (%q → %q): %v, want ErrTenantStream", i, stream[i], bad[i], err)
		}
	}
}

// FuzzReadTenantStream: ReadTenantStream never panics, and whatever it
// accepts writes back to a stream it accepts again with the same counts.
func FuzzReadTenantStream(f *testing.F) {
	var out bytes.Buffer
	if _, err := registry.WriteTenantStream(&out, sampleDump()); err != nil {
		f.Fatal(err)
	}
	f.Add(out.Bytes())
	f.Add([]byte("{\"kind\":\"end\"}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := registry.ReadTenantStream(bytes.NewReader(b))
		if err != nil {
			return
		}
		var again bytes.Buffer
		counts, err := registry.WriteTenantStream(&again, d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := registry.ReadTenantStream(bytes.NewReader(again.Bytes()))
		if err != nil || d2.Counts() != counts {
			t.Fatalf("an accepted stream written again: %v, counts %+v want %+v", err, d2.Counts(), counts)
		}
	})
}
