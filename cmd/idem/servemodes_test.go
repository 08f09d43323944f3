package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeModeAndRevisionUsage: --mode and --revision naming an
// operation the service does not serve, an unknown mode, a malformed
// revision or one compatible with itself, and transfers.create off are
// usage errors (exit 2) with a clear line, before anything is opened.
func TestServeModeAndRevisionUsage(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "never.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "payments.crate=shadow"}, `unknown operation "payments.crate" (this service's: payments.create, payments.refund)`},
		{[]string{"--mode", "transfers.create=shadow"}, `unknown operation "transfers.create"`},
		{[]string{"--mode", "payments.create=sideways"}, `unknown mode "sideways"`},
		{[]string{"--mode", "payments.create=shadow", "--mode", "payments.create=off"}, "--mode given twice"},
		{[]string{"--mode", "transfers.create=off", "--provider", "http://127.0.0.1:1"}, "use shadow"},
		{[]string{"--revision", "payments.create=v2:v2"}, "cannot accept its own records"},
		{[]string{"--revision", "payments.create="}, "want OPERATION=REVISION"},
		{[]string{"--revision", "payments.create=v2:"}, "want OPERATION=REVISION"},
		{[]string{"--revision", "refunds=v2"}, `unknown operation "refunds"`},
	} {
		code, out, stderr := runCmd(t, "", append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: code %d, out %q, stderr %q; want exit 2 saying %q", tc.args, code, out, stderr, tc.want)
		}
	}
}

// TestServeShadowCountsFlushed: "idem serve --mode payments.create=shadow"
// serves the operation in shadow — a retry of a key is executed again
// (never enforced: nothing to keep) — and the verdict counts of its last
// requests are written at shutdown: "idem rollout report" shows the
// shadow's execute and the replay enforce would have answered.
func TestServeShadowCountsFlushed(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "shadow.db")
	s := startServe(t, "--db", dsn, "--mode", "payments.create=shadow")
	const body = `{"amount":"2.00","currency":"EUR","payee":"acct_shadow"}`
	for i := range 2 {
		resp, b := s.post(t, "demo", "shadow-1", body)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("POST %d in shadow: %d %v %s, want 201 executed", i, resp.StatusCode, resp.Header, b)
		}
	}
	s.stop(t)
	if !strings.Contains(s.logs.String(), "verdict counts flushed") {
		t.Errorf("no flush logged at shutdown:\n%s", s.logs)
	}
	code, out, stderr := runCmd(t, "", "rollout", "report", "payments.create", "--db", dsn)
	for _, want := range [][]string{{"demo", "execute", "1", "0"}, {"demo", "replay", "1", "0"}} {
		if f := tableRow(out, want[:2]...); code != exitOK || strings.Join(f, " ") != strings.Join(want, " ") {
			t.Errorf("report line %q: got %q (code %d, stderr %q) in\n%s", want, f, code, stderr, out)
		}
	}
}

// TestServeRevisionCompatible: a retry that crosses a deploy from v1 to
// a server started with --api-revision v2 --revision
// payments.create=v2:v1 replays; to one started with --api-revision v2
// alone (the seed's rule) it executes again.
func TestServeRevisionCompatible(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "revision.db")
	const body = `{"amount":"5.00","currency":"EUR","payee":"acct_rev"}`
	v1 := startServe(t, "--db", dsn)
	first, firstBody := v1.post(t, "demo", "rev-cross", body)
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("v1: %d %s", first.StatusCode, firstBody)
	}
	v1.stop(t)
	v2 := startServe(t, "--db", dsn, "--api-revision", "v2", "--revision", "payments.create=v2:v1")
	resp, b := v2.post(t, "demo", "rev-cross", body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || string(b) != string(firstBody) {
		t.Errorf("retry on v2:v1: %d %v %s, want the v1 answer replayed", resp.StatusCode, resp.Header, b)
	}
	v2.stop(t)
	plain := startServe(t, "--db", dsn, "--api-revision", "v2")
	resp, b = plain.post(t, "demo", "rev-cross", body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" || string(b) == string(firstBody) {
		t.Errorf("retry on --api-revision v2: %d %v %s, want a second execution (the seed's rule)", resp.StatusCode, resp.Header, b)
	}
}
