package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDrain(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		code, out, stderr := runCmd(t, "", "drain", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "draining      off\n") || !strings.Contains(out, "writer epoch  0\n") {
			t.Fatalf("drain (show): code %d, out %q, stderr %q", code, out, stderr)
		}
		code, out, stderr = runCmd(t, "", "drain", "on", "--db", dsn)
		if code != exitOK || !strings.HasPrefix(out, "draining on\n") || !strings.Contains(out, "503 DRAINING") {
			t.Fatalf("drain on: code %d, out %q, stderr %q", code, out, stderr)
		}
		if c := controlRow(t, "drain", "show", "--db", dsn); !c.Draining || c.WriterEpoch != 0 {
			t.Errorf("after drain on: %+v", c)
		}
		code, out, stderr = runCmd(t, "", "drain", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "draining      on\n") {
			t.Errorf("drain (show) while draining: code %d, out %q, stderr %q", code, out, stderr)
		}
		if c := controlRow(t, "drain", "on", "--db", dsn); !c.Draining { // again: harmless
			t.Errorf("after a second drain on: %+v", c)
		}
		if c := controlRow(t, "drain", "--db", dsn, "off"); c.Draining || c.WriterEpoch != 0 {
			t.Errorf("after drain off --json: %+v", c)
		}
		code, out, stderr = runCmd(t, "", "drain", "off", "--db", dsn)
		if code != exitOK || !strings.HasPrefix(out, "draining off\n") {
			t.Errorf("drain off: code %d, out %q, stderr %q", code, out, stderr)
		}
	})
}

// flipWithin bounds how long a running server may take to follow a drain
// change: its refresh interval (idemhttp.DefaultAdmitRefresh, 1s) plus
// slack for a slow, race-instrumented machine.
const flipWithin = 15 * time.Second

// TestDrainAndBumpAgainstServe drives a running "idem serve" with the CLI:
// drain on → new operations answer 503 DRAINING within the refresh
// interval while a replay still answers 201 replayed; drain off → the
// refused key runs; epoch bump → the server, started at the old epoch,
// answers WRITER_FENCED for new operations and still replays, and a server
// started after the bump accepts them.
func TestDrainAndBumpAgainstServe(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		s := startServe(t, "--db", dsn)
		const body = `{"amount":"12.50","currency":"EUR","payee":"acct_drain"}`
		first, firstBody := s.post(t, "demo", "before-drain", body)
		if first.StatusCode != http.StatusCreated {
			t.Fatalf("first POST: %d %s", first.StatusCode, firstBody)
		}
		replayed := func(what string) {
			t.Helper()
			resp, b := s.post(t, "demo", "before-drain", body)
			if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b, firstBody) {
				t.Errorf("replay %s: %d %v %s, want 201 replayed %s", what, resp.StatusCode, resp.Header, b, firstBody)
			}
		}
		cli := func(args ...string) {
			t.Helper()
			if code, out, stderr := runCmd(t, "", append(args, "--db", dsn)...); code != exitOK {
				t.Fatalf("%q: code %d, out %q, stderr %q", args, code, out, stderr)
			}
		}
		is := func(status int, code string) func(*http.Response, []byte) bool {
			return func(resp *http.Response, b []byte) bool {
				return resp.StatusCode == status && (code == "" || problemCode(t, b) == code)
			}
		}

		cli("drain", "on")
		var drainedKey string
		pollUntil(t, "503 DRAINING after drain on", flipWithin, func(n int) (*http.Response, []byte) {
			drainedKey = fmt.Sprintf("during-drain-%d", n) // a key accepted before the flip is used up
			return s.post(t, "demo", drainedKey, body)
		}, is(http.StatusServiceUnavailable, "DRAINING"))
		replayed("while draining")

		cli("drain", "off")
		resp, b := pollUntil(t, "the drained key runs after drain off", flipWithin, func(int) (*http.Response, []byte) {
			return s.post(t, "demo", drainedKey, body) // refused keys were released, so the same key runs
		}, is(http.StatusCreated, ""))
		if resp.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the drained key was replayed, not executed: %v %s", resp.Header, b)
		}

		cli("epoch", "bump")
		pollUntil(t, "503 WRITER_FENCED after epoch bump", flipWithin, func(n int) (*http.Response, []byte) {
			return s.post(t, "demo", fmt.Sprintf("after-bump-%d", n), body)
		}, is(http.StatusServiceUnavailable, "WRITER_FENCED"))
		replayed("after the bump")

		next := startServe(t, "--db", dsn)
		if resp, b := next.post(t, "demo", "new-writer", body); resp.StatusCode != http.StatusCreated {
			t.Errorf("a server started after the bump: %d %s, want 201", resp.StatusCode, b)
		}
		next.stop(t)
		s.stop(t)
	})
}
