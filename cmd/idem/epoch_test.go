package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

// registries runs fn once per driver, on a fresh registry each.
func registries(t *testing.T, fn func(t *testing.T, dsn string)) {
	pgtest.EachDriver(t, "control.db", func(t *testing.T, _, dsn string) {
		fn(t, dsn)
	})
}

// controlRow runs a control command with --json and decodes its output,
// failing the test unless it exits 0 and prints exactly the three members.
func controlRow(t *testing.T, args ...string) controlJSON {
	t.Helper()
	code, out, stderr := runCmd(t, "", append(args, "--json")...)
	if code != exitOK {
		t.Fatalf("%q: code %d, stderr %q", args, code, stderr)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &members); err != nil || len(members) != 3 || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("%q: output %q is not one JSON object line with three members (%v)", args, out, err)
	}
	var c controlJSON
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("%q: %v in %q", args, err, out)
	}
	if _, ok := members["writer_epoch"]; !ok || c.UpdatedAt.IsZero() {
		t.Fatalf("%q: output %q lacks writer_epoch or updated_at", args, out)
	}
	return c
}

func TestEpoch(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		code, out, stderr := runCmd(t, "", "epoch", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "writer epoch  0\n") || !strings.Contains(out, "draining      off\n") ||
			!strings.Contains(out, "updated at    ") {
			t.Fatalf("epoch (show): code %d, out %q, stderr %q", code, out, stderr)
		}
		before := controlRow(t, "epoch", "show", "--db", dsn)
		if before.WriterEpoch != 0 || before.Draining {
			t.Errorf("initial control row %+v", before)
		}
		code, out, stderr = runCmd(t, "", "epoch", "bump", "--db", dsn)
		if code != exitOK || !strings.HasPrefix(out, "writer epoch 0 -> 1\n") || !strings.Contains(out, "WRITER_FENCED") {
			t.Fatalf("epoch bump: code %d, out %q, stderr %q", code, out, stderr)
		}
		// Flags before the action work too; --json prints the row after the bump.
		after := controlRow(t, "epoch", "--db", dsn, "bump")
		if after.WriterEpoch != 2 || after.Draining || after.UpdatedAt.Before(before.UpdatedAt) {
			t.Errorf("control row after two bumps %+v (before %+v)", after, before)
		}
		if c := controlRow(t, "epoch", "--db", dsn); c != after {
			t.Errorf("epoch show after the bumps: %+v, want %+v", c, after)
		}
	})
}

func TestEpochUsage(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "u.db")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"epoch", "raise", "--db", db}, exitUsage},
		{[]string{"epoch", "show", "bump", "--db", db}, exitUsage},
		{[]string{"epoch", "--db", db, "show", "extra"}, exitUsage},
		{[]string{"epoch", "--nope"}, exitUsage},
		{[]string{"drain", "maybe", "--db", db}, exitUsage},
		{[]string{"drain", "on", "off", "--db", db}, exitUsage},
		{[]string{"epoch", "bump", "--db", "mysql://u:secret@h/db"}, exitRefused},
		{[]string{"drain", "on", "--db", "mysql://u:secret@h/db"}, exitRefused},
	} {
		code, out, stderr := runCmd(t, "", c.args...)
		if code != c.code || out != "" || strings.Contains(stderr, "secret") {
			t.Errorf("%q: code %d (want %d), out %q, stderr %q", c.args, code, c.code, out, stderr)
		}
	}
	// The refused commands changed nothing.
	if c := controlRow(t, "epoch", "--db", db); c.WriterEpoch != 0 || c.Draining {
		t.Errorf("control row after refused commands: %+v", c)
	}
}

// TestServeWriterEpochFlag: "idem serve" writes at the registry's epoch at
// start by default, at --writer-epoch when given (a stale one is fenced at
// once), and refuses an epoch below -1.
func TestServeWriterEpochFlag(t *testing.T) {
	t.Parallel()
	if code, _, stderr := runCmd(t, "", "serve", "--writer-epoch", "-2"); code != exitUsage {
		t.Errorf("serve --writer-epoch -2: code %d, stderr %q", code, stderr)
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "flag.db")
	for range 2 {
		if code, _, stderr := runCmd(t, "", "epoch", "bump", "--db", db); code != exitOK {
			t.Fatalf("epoch bump: %d %s", code, stderr)
		}
	}
	const body = `{"amount":"3.00","currency":"EUR","payee":"acct_flag"}`
	current := startServe(t, "--db", db)
	if !strings.Contains(current.logs.String(), "writer_epoch=2") {
		t.Errorf("serve did not log the registry's epoch 2:\n%s", current.logs)
	}
	if resp, b := current.post(t, "demo", "flag-current", body); resp.StatusCode != http.StatusCreated {
		t.Errorf("server at the current epoch: %d %s", resp.StatusCode, b)
	}
	stale := startServe(t, "--db", db, "--writer-epoch", "1")
	resp, b := stale.post(t, "demo", "flag-stale", body)
	if resp.StatusCode != http.StatusServiceUnavailable || problemCode(t, b) != "WRITER_FENCED" {
		t.Errorf("server started at a stale epoch: %d %s, want 503 WRITER_FENCED", resp.StatusCode, b)
	}
	if resp, b := stale.post(t, "demo", "flag-current", body); resp.StatusCode != http.StatusCreated ||
		resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay on the stale server: %d %v %s, want 201 replayed", resp.StatusCode, resp.Header, b)
	}
	stale.stop(t)
	current.stop(t)
}

// problemCode returns the code member of a problem+json body.
func problemCode(t *testing.T, body []byte) string {
	t.Helper()
	var p struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not a problem+json body: %q (%v)", body, err)
	}
	return p.Code
}

// pollUntil repeats a request until want accepts its answer or the
// deadline passes, and returns the accepted answer. Each try gets the try
// number, so a request may change (for instance its key) between tries.
func pollUntil(t *testing.T, what string, deadline time.Duration, try func(n int) (*http.Response, []byte),
	want func(*http.Response, []byte) bool) (*http.Response, []byte) {
	t.Helper()
	var seen []int
	start := time.Now()
	end := start.Add(deadline)
	for n := 0; ; n++ {
		resp, b := try(n)
		if want(resp, b) {
			t.Logf("%s: after %d tries, %v", what, n+1, time.Since(start).Round(time.Millisecond))
			return resp, b
		}
		if !slices.Contains(seen, resp.StatusCode) {
			seen = append(seen, resp.StatusCode)
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v (%d tries, statuses %v; last %d %s)", what, deadline, n+1, seen, resp.StatusCode, b)
		}
	}
}
