package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/example/provider"
)

// startProvider runs "idem provider --addr 127.0.0.1:0 args…" in process
// and returns once it logged its address (see logWatch in serve_test.go).
func startProvider(t *testing.T, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{logs: newLogWatch(), cancel: cancel, done: make(chan int, 1)}
	args = append([]string{"provider", "--addr", "127.0.0.1:0"}, args...)
	go func() { s.done <- run(ctx, args, stdio{in: strings.NewReader(""), out: io.Discard, err: s.logs}) }()
	t.Cleanup(func() {
		cancel()
		<-s.done // never leave the provider running; stop checks the code
	})
	select {
	case addr := <-s.logs.addr:
		s.url = "http://" + addr
	case code := <-s.done:
		s.done <- code
		t.Fatalf("provider exited %d before listening:\n%s", code, s.logs)
	}
	return s
}

// providerDo sends one request to the provider; key "" sends no
// Idempotency-Key.
func providerDo(t *testing.T, s *server, method, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return do(t, req)
}

func TestProviderCommand(t *testing.T) {
	t.Parallel()
	s := startProvider(t)
	const body = `{"amount":"12.50","currency":"EUR","payee":"acct_1","reference":"op_1"}`
	first, firstBody := providerDo(t, s, http.MethodPost, "/transfers", "k-1", body)
	if first.StatusCode != http.StatusCreated || !strings.Contains(string(firstBody), `"id":"tr_1"`) {
		t.Fatalf("first: %d %s", first.StatusCode, firstBody)
	}
	again, againBody := providerDo(t, s, http.MethodPost, "/transfers", "k-1", body)
	if again.StatusCode != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(againBody, firstBody) {
		t.Errorf("replay: %d %v %s", again.StatusCode, again.Header, againBody)
	}
	if resp, b := providerDo(t, s, http.MethodPost, "/transfers", "k-1", `{"amount":"1"}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("conflict: %d %s", resp.StatusCode, b)
	}
	if resp, b := providerDo(t, s, http.MethodGet, "/transfers/k-1", "", ""); resp.StatusCode != http.StatusOK || !bytes.Equal(b, firstBody) {
		t.Errorf("GET k-1: %d %s", resp.StatusCode, b)
	}
	if resp, _ := providerDo(t, s, http.MethodGet, "/transfers/k-2", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET k-2: %d", resp.StatusCode)
	}
	if resp, b := providerDo(t, s, http.MethodGet, "/stats", "", ""); resp.StatusCode != http.StatusOK || string(b) != `{"executed":1,"declined":0}` {
		t.Errorf("stats: %d %s", resp.StatusCode, b)
	}
	s.stop(t)
	if logs := s.logs.String(); !strings.Contains(logs, "addr=127.0.0.1:") || !strings.Contains(logs, "stopped") {
		t.Errorf("logs:\n%s", logs)
	}
}

// TestProviderCommandStopsHeld checks that stopping the provider cuts off a
// request held by hang mode at once (not after shutdownTimeout) and still
// exits 0.
func TestProviderCommandStopsHeld(t *testing.T) {
	t.Parallel()
	s := startProvider(t)
	if resp, b := providerDo(t, s, http.MethodPost, "/control", "", `{"mode":"hang"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("control: %d %s", resp.StatusCode, b)
	}
	held := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/transfers", strings.NewReader(`{"amount":"1.00"}`))
		req.Header.Set("Idempotency-Key", "held")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	if resp, b := providerDo(t, s, http.MethodGet, "/control?wait_hung=1", "", ""); resp.StatusCode != http.StatusOK ||
		string(b) != `{"mode":"hang","hung":1}` {
		t.Fatalf("wait_hung: %d %s", resp.StatusCode, b)
	}
	if resp, b := providerDo(t, s, http.MethodGet, "/stats", "", ""); string(b) != `{"executed":1,"declined":0}` {
		t.Errorf("stats while held: %d %s", resp.StatusCode, b)
	}
	s.stop(t)
	if err := <-held; err == nil {
		t.Error("the held request got an answer; want the connection cut")
	}
}

func TestProviderCommandRefuses(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"provider", "extra"}, exitUsage},
		{[]string{"provider", "--nope"}, exitUsage},
		{[]string{"provider", "--addr", busy.Addr().String()}, exitRefused},
		{[]string{"provider", "--events-url", "http://127.0.0.1:1/"}, exitUsage},
		{[]string{"provider", "--state", t.TempDir()}, exitRefused}, // a directory
	} {
		code, _, stderr := runCmd(t, "", c.args...)
		if code != c.code || strings.Contains(stderr, "listening on") {
			t.Errorf("%q: code %d, want %d; stderr:\n%s", c.args, code, c.code, stderr)
		}
	}
}

// TestProviderHelpNamesEveryMode: "idem help provider" names every mode
// package provider defines (provider.Modes), as POST /control takes it,
// and the count, the state file and the events, so the help cannot drift
// from the package.
func TestProviderHelpNamesEveryMode(t *testing.T) {
	t.Parallel()
	code, help, _ := runCmd(t, "", "help", "provider")
	if code != exitOK {
		t.Fatalf("idem help provider: exit %d", code)
	}
	for _, m := range provider.Modes() {
		if !strings.Contains(help, "\n  \""+string(m)+"\" ") {
			t.Errorf("the help does not describe mode %q:\n%s", m, help)
		}
	}
	for _, s := range []string{`"count": N`, "--state FILE", "--events-url URL", "-events-secret-file"} {
		if !strings.Contains(help, s) {
			t.Errorf("the help does not name %s:\n%s", s, help)
		}
	}
}
