package main

import (
	"encoding/json"
	"strings"
	"testing"
)

type fpOut struct {
	Fingerprint string `json:"fingerprint"`
	Contract    string `json:"contract"`
	Parts       struct {
		Method         string   `json:"method"`
		Target         string   `json:"target"`
		Headers        []string `json:"headers"`
		MediaType      string   `json:"media_type"`
		Mode           string   `json:"mode"`
		SchemaRevision string   `json:"schema_revision"`
		PayloadSHA256  string   `json:"payload_sha256"`
	} `json:"parts"`
	CanonicalPayload string `json:"canonical_payload"`
}

func fingerprint(t *testing.T, body string, args ...string) fpOut {
	t.Helper()
	code, out, stderr := runCmd(t, body, append([]string{"fingerprint"}, args...)...)
	if code != exitOK {
		t.Fatalf("fingerprint %v: code %d, stderr %q", args, code, stderr)
	}
	var o fpOut
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(o.Fingerprint) != 64 || o.Contract != "http.idempotency.v1" {
		t.Fatalf("bad output: %+v", o)
	}
	return o
}

func TestFingerprintShowsWhyRequestsDiffer(t *testing.T) {
	t.Parallel()
	schema := []string{"--mode", "schema", "--schema", "../../canon/testdata/payments.v1.json"}
	base := func(extra ...string) []string {
		return append([]string{"--target", "/v1/payments?dry_run=1&trace=abc", "--query-keep", "dry_run",
			"--header-keep", "X-Api-Version", "--header", "X-Api-Version: 2"}, extra...)
	}
	a := fingerprint(t, `{"amount":"12.5","currency":"EUR","payee":"p"}`, base(schema...)...)
	b := fingerprint(t, ` {"payee":"p", "currency":"EUR", "amount":"12.50"}`, base(schema...)...)
	if a.Fingerprint != b.Fingerprint {
		t.Errorf("12.5 and 12.50 at scale 2, reordered: fingerprints differ:\n%+v\n%+v", a, b)
	}
	if a.Parts.Target != "/v1/payments?dry_run=1" || a.Parts.SchemaRevision != "payments.v1" ||
		len(a.Parts.Headers) != 1 || a.Parts.Headers[0] != "x-api-version: 2" {
		t.Errorf("parts: %+v", a.Parts)
	}
	c := fingerprint(t, `{"amount":"12.51","currency":"EUR","payee":"p"}`, base(schema...)...)
	if c.Fingerprint == a.Fingerprint || c.Parts.PayloadSHA256 == a.Parts.PayloadSHA256 {
		t.Errorf("changed amount: same fingerprint or payload hash")
	}
	d := fingerprint(t, `{"amount":"12.5","currency":"EUR","payee":"p"}`,
		append([]string{"--target", "/v1/payments?dry_run=0", "--query-keep", "dry_run",
			"--header-keep", "X-Api-Version", "--header", "X-Api-Version: 2"}, schema...)...)
	if d.Fingerprint == a.Fingerprint || d.Parts.PayloadSHA256 != a.Parts.PayloadSHA256 {
		t.Errorf("changed significant query: want a different fingerprint with the same payload")
	}
	e := fingerprint(t, `{"amount":"12.5","currency":"EUR","payee":"p"}`, base(append(schema, "--method", "PUT")...)...)
	if e.Fingerprint == a.Fingerprint || e.Parts.Method != "PUT" {
		t.Errorf("changed method: %+v", e.Parts)
	}
}

// Proves threat:same-key-different-request (docs/threat-model.md).
func TestFingerprintRefusals(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCmd(t, `{}`, "fingerprint", "--target", "/x", "--content-type", "text/plain")
	if code != exitRefused || !strings.HasPrefix(stderr, "UNSUPPORTED_MEDIA_TYPE: ") {
		t.Errorf("text/plain: code %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCmd(t, `{"a":1,"a":1}`, "fingerprint", "--target", "/x")
	if code != exitRefused || !strings.HasPrefix(stderr, "INVALID_JSON: ") {
		t.Errorf("duplicate member: code %d, stderr %q", code, stderr)
	}
	if code, _, _ = runCmd(t, `{}`, "fingerprint"); code != exitUsage {
		t.Errorf("missing --target: code %d", code)
	}
	if code, _, _ = runCmd(t, `{}`, "fingerprint", "--target", "/x", "--header", "nocolon"); code != exitUsage {
		t.Errorf("bad --header: code %d", code)
	}
}
