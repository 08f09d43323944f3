package main

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeConsoleReload: "idem serve" reads its operators file again on
// SIGHUP. An operator removed from it loses their session at once (the
// old cookie redirects to the login page) and their token logs in no
// more; the one kept stays logged in; an invalid file changes nothing.
// threat:console-session-after-removal
func TestServeConsoleReload(t *testing.T) {
	dir := t.TempDir()
	ops := filepath.Join(dir, "operators.json")
	const alice, bob = "op-alice-Zr4kW9pQ2mX7vT1nB8yL5c", "op-bob-Hd3sF6gJ0aK9wE2rU7iO4p"
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(ops, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"` + alice + `": {"name": "alice"}, "` + bob + `": {"name": "bob"}}`)
	s := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "serve.db"), "--admin-addr", "127.0.0.1:0", "--operators", ops)
	s.logs.waitFor(t, contains("console listening on"), 30*time.Second, "the console line")
	consoleURL := "http://" + consoleLine.FindStringSubmatch(s.logs.String())[1]

	noRedirect := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(tok string) (int, *http.Cookie) {
		t.Helper()
		resp, err := noRedirect.PostForm(consoleURL+"/login", url.Values{"token": {tok}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == "idem_console" {
				return resp.StatusCode, c
			}
		}
		return resp.StatusCode, nil
	}
	status := func(c *http.Cookie) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, consoleURL+"/", nil)
		req.AddCookie(c)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Location")
	}
	_, ca := login(alice)
	_, cb := login(bob)
	if ca == nil || cb == nil {
		t.Fatal("no session cookie at login")
	}
	hup := func(n int) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.logs.waitFor(t, func(l string) bool {
			return strings.Count(l, "console: operators reloaded")+strings.Count(l, "operators file was not reloaded") >= n
		}, 30*time.Second, "the reload's line")
	}
	write(`{"` + alice + `": {"name": ""}}`)
	hup(1)
	if code, _ := status(cb); code != http.StatusOK {
		t.Fatalf("bob after an invalid file was refused: %d; want 200", code)
	}
	write(`{"` + alice + `": {"name": "alice"}}`)
	hup(2)
	if code, loc := status(cb); code != http.StatusSeeOther || loc != "/login" {
		t.Errorf("bob's old cookie after his removal: %d %q; want 303 to /login", code, loc)
	}
	if code, _ := login(bob); code != http.StatusUnauthorized {
		t.Errorf("bob's token after his removal: %d; want 401", code)
	}
	if code, _ := status(ca); code != http.StatusOK {
		t.Errorf("alice after bob's removal: %d; want 200", code)
	}
}
