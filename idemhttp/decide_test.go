package idemhttp

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

func TestDecide(t *testing.T) {
	fp := idem.Fingerprint{1}
	other := idem.Fingerprint{2}
	rec := func(s idem.State, f idem.Fingerprint) registry.Record {
		return registry.Record{State: s, Fingerprint: f, OperationID: "op_1"}
	}
	cases := []struct {
		name    string
		rec     registry.Record
		created bool
		wait    time.Duration
		want    Decision
	}{
		{"created", rec(idem.StateReserved, fp), true, 0, Decision{Verdict: registry.Execute}},
		{"terminal", rec(idem.StateSucceeded, fp), false, 0, Decision{Verdict: registry.Replay}},
		{"failed final", rec(idem.StateFailedFinal, fp), false, 0, Decision{Verdict: registry.Replay}},
		{"conflict terminal", rec(idem.StateSucceeded, other), false, 0, Decision{Verdict: registry.Conflict, Code: idem.CodePayloadConflict}},
		{"conflict in flight", rec(idem.StateReserved, other), false, time.Second, Decision{Verdict: registry.Conflict, Code: idem.CodePayloadConflict}},
		{"in flight", rec(idem.StateExecuting, fp), false, 0, Decision{Verdict: registry.InProgress, Code: idem.CodeInProgress}},
		{"in flight, wait", rec(idem.StateReserved, fp), false, time.Second, Decision{Verdict: registry.InProgress, Code: idem.CodeInProgress, Wait: true}},
		{"unknown", rec(idem.StateUnknown, fp), false, time.Second, Decision{Verdict: registry.Unknown, Code: idem.CodeOutcomeUnknown}},
	}
	for _, c := range cases {
		if got := Decide(c.rec, c.created, Request{Fingerprint: fp, Wait: c.wait}); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestPreferWait(t *testing.T) {
	cases := map[string]time.Duration{
		"":                        0,
		"wait=5":                  5 * time.Second,
		"respond-async, wait=3":   3 * time.Second,
		"WAIT = 2":                2 * time.Second,
		`wait="4"`:                4 * time.Second,
		"wait=0":                  0,
		"wait=-1":                 0,
		"wait=abc":                0,
		"return=minimal":          0,
		"wait=99999":              time.Hour,
		"handling=strict; wait=1": 0,
	}
	for in, want := range cases {
		h := http.Header{}
		if in != "" {
			h.Set("Prefer", in)
		}
		if got := preferWait(h); got != want {
			t.Errorf("Prefer %q: %v, want %v", in, got, want)
		}
	}
}

func TestPrepareRefusals(t *testing.T) {
	m := &Middleware{Operation: Operation{Name: "op", APIRevision: "v1"}, WaitCap: 2 * time.Second}
	req := func(keys []string, ct, body string) (*http.Request, []byte) {
		r := &http.Request{Method: "POST", URL: &url.URL{Path: "/x"}, Header: http.Header{}}
		for _, k := range keys {
			r.Header.Add(idem.KeyHeader, k)
		}
		r.Header.Set("Content-Type", ct)
		r.Header.Set("Prefer", "wait=30")
		return r, []byte(body)
	}
	cases := []struct {
		keys     []string
		ct, body string
		code     idem.Code
	}{
		{nil, "application/json", `{}`, idem.CodeKeyMissing},
		{[]string{"a", "b"}, "application/json", `{}`, idem.CodeKeyMultiple},
		{[]string{"a b"}, "application/json", `{}`, idem.CodeKeyInvalid},
		{[]string{"k"}, "text/plain", `{}`, idem.CodeUnsupportedMediaType},
		{[]string{"k"}, "application/json", `{"a":1,"a":2}`, idem.CodeInvalidJSON},
	}
	for _, c := range cases {
		r, body := req(c.keys, c.ct, c.body)
		if _, err := m.Prepare(r, idem.Identity{Tenant: "t", Principal: "p"}, body); idem.CodeOf(err) != c.code {
			t.Errorf("%v %s %s: %v, want %s", c.keys, c.ct, c.body, err, c.code)
		}
	}
	r, body := req([]string{"k"}, "application/json", `{"b":1, "a":2}`)
	got, err := m.Prepare(r, idem.Identity{Tenant: "t", Principal: "p"}, body)
	if err != nil || got.Wait != 2*time.Second || string(got.Parts.Payload) != `{"a":2,"b":1}` {
		t.Errorf("Prepare: %+v, %v (want the wait capped at 2s and the canonical payload)", got, err)
	}
	other, _ := m.Prepare(r, idem.Identity{Tenant: "t", Principal: "q"}, body)
	if other.Scope == got.Scope || other.Fingerprint != got.Fingerprint {
		t.Errorf("another principal: want another scope and the same fingerprint")
	}
}

func TestIsSelect(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]bool{
		"SELECT 1":                 true,
		"  select count(*) FROM t": true,
		"\n-- name: get\n-- a read\nSELECT a FROM t":            true,
		"/* note */ SELECT a FROM t FOR UPDATE":                 true,
		"SELECT":                                                true,
		"SELECTED":                                              false,
		"INSERT INTO t VALUES (1) RETURNING a":                  false,
		"WITH d AS (DELETE FROM t RETURNING a) SELECT a FROM d": false,
		"UPDATE t SET a = 1 RETURNING a":                        false,
		"-- only a comment":                                     false,
		"/* unclosed SELECT":                                    false,
		"":                                                      false,
	} {
		if got := isSelect(sql); got != want {
			t.Errorf("isSelect(%q) = %v, want %v", sql, got, want)
		}
	}
}
