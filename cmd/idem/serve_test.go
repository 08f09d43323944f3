package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/keygen"
)

// listeningLine matches the line "idem serve" logs once it is bound.
var listeningLine = regexp.MustCompile(`listening on ([^\s"]+)`)

// logWatch is a stderr for "idem serve" run in process: it keeps what is
// written, sends the address of the first "listening on" line on addr,
// and wakes the waiters of waitFor on every write.
type logWatch struct {
	addr    chan string
	mu      sync.Mutex
	buf     bytes.Buffer
	sent    bool
	changed chan struct{} // closed and replaced on every write
}

func newLogWatch() *logWatch {
	return &logWatch{addr: make(chan string, 1), changed: make(chan struct{})}
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := listeningLine.FindSubmatch(w.buf.Bytes()); m != nil && !w.sent {
		w.sent = true
		w.addr <- string(m[1])
	}
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until the logs hold what, checked after every write,
// and fails the test if they do not within d: the logs of a background
// loop (pruning, recovery, the relay) are written after the effect a
// test can see, so a test checks them with waitFor, never right away.
func (w *logWatch) waitFor(t *testing.T, what func(logs string) bool, d time.Duration, msg string) {
	t.Helper()
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		w.mu.Lock()
		logs, changed := w.buf.String(), w.changed
		w.mu.Unlock()
		if what(logs) {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("%s: not logged within %v:\n%s", msg, d, w)
		}
	}
}

// contains is a waitFor condition: the logs contain s.
func contains(s string) func(string) bool {
	return func(logs string) bool { return strings.Contains(logs, s) }
}

// server is an "idem serve" running in process.
type server struct {
	url    string
	logs   *logWatch
	cancel context.CancelFunc
	done   chan int
}

// startServe runs "idem serve --addr 127.0.0.1:0 args…" and returns once
// it logged its address. stop ends it.
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{logs: newLogWatch(), cancel: cancel, done: make(chan int, 1)}
	args = append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)
	go func() { s.done <- run(ctx, args, stdio{in: strings.NewReader(""), out: io.Discard, err: s.logs}) }()
	t.Cleanup(func() {
		cancel()
		<-s.done // never leave the server running; stop checks the code
	})
	select {
	case addr := <-s.logs.addr:
		s.url = "http://" + addr
	case code := <-s.done:
		s.done <- code
		t.Fatalf("serve exited %d before listening:\n%s", code, s.logs)
	}
	return s
}

// stop cancels the server's context and requires a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	code := <-s.done
	s.done <- code
	if code != exitOK {
		t.Fatalf("serve exited %d:\n%s", code, s.logs)
	}
}

func (s *server) post(t *testing.T, token, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", keygen.ForLabel(key)) // "key-1": a strict key derived from it
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestServe(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--db", "sqlite:"+filepath.Join(t.TempDir(), "serve.db"))
	const body = `{"amount":"12.5","currency":"EUR","payee":"acct_1"}`
	first, firstBody := s.post(t, "demo", "key-1", body)
	if first.StatusCode != http.StatusCreated || !strings.HasPrefix(first.Header.Get("Location"), "/v1/payments/pay_") ||
		!strings.Contains(string(firstBody), `"amount":"12.50"`) {
		t.Fatalf("create: %d %v %s", first.StatusCode, first.Header, firstBody)
	}
	again, againBody := s.post(t, "demo", "key-1", `{"payee":"acct_1","currency":"EUR","amount":"12.50"}`)
	if again.StatusCode != http.StatusCreated || !bytes.Equal(againBody, firstBody) ||
		again.Header.Get("Idempotent-Replayed") != "true" ||
		again.Header.Get("Idempotency-Operation") != first.Header.Get("Idempotency-Operation") {
		t.Fatalf("replay: %d %v %s, first %s", again.StatusCode, again.Header, againBody, firstBody)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/healthz", nil)
	if resp, b := do(t, req); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d %s", resp.StatusCode, b)
	}
	s.stop(t)
	logs := s.logs.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, `demo token`) {
		t.Errorf("no warning about the demo token:\n%s", logs)
	}
}

func TestServeAuthFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(auth, []byte(`{"s3cret-Zr4kW9pQ2mX7vT1nB8yL5c": {"tenant": "acme", "principal": "alice"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "serve.db"), "--auth", auth,
		"--lease", "5s", "--retention", "1h", "--client-retry-window", "1h", "--queue-backlog-window", "10m",
		"--reconciliation-window", "30m", "--restore-window", "0s", "--recover-interval", "1s", "--provider", "http://127.0.0.1:1")
	const body = `{"amount":"1","currency":"EUR","payee":"p"}`
	if resp, b := s.post(t, "demo", "k", body); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("demo token with --auth: %d %s", resp.StatusCode, b)
	}
	if resp, b := s.post(t, "s3cret-Zr4kW9pQ2mX7vT1nB8yL5c", "k", body); resp.StatusCode != http.StatusCreated {
		t.Errorf("token of the file: %d %s", resp.StatusCode, b)
	}
	s.stop(t)
	if strings.Contains(s.logs.String(), "demo token") {
		t.Errorf("demo token warning with --auth:\n%s", s.logs)
	}
}

func TestServeRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	badAuth := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(badAuth, []byte(`{"t": {"tenant": "", "principal": "p"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	db := "sqlite:" + filepath.Join(dir, "x.db")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"serve", "extra"}, exitUsage},
		{[]string{"serve", "--lease", "0s"}, exitUsage},
		{[]string{"serve", "--replay-cache", "-1"}, exitUsage},
		{[]string{"serve", "--replay-cache", "10", "--replay-cache-margin", "0s"}, exitUsage},
		{[]string{"serve", "--replay-cache", "10", "--replay-cache-bytes", "0"}, exitUsage},
		{[]string{"serve", "--db", db, "--replay-cache", "10", "--replay-cache-margin", "24h"}, exitUsage}, // = the default --retention: would serve nothing
		{[]string{"serve", "--nope"}, exitUsage},
		{[]string{"serve", "--db", db, "--auth", badAuth}, exitRefused},
		{[]string{"serve", "--db", "mysql://u:hunter2@h/db"}, exitRefused},
		{[]string{"serve", "--db", db, "--addr", busy.Addr().String()}, exitRefused},
		{[]string{"serve", "--db", db, "--provider-events-secret-file", badAuth}, exitUsage}, // no --provider
		{[]string{"serve", "--db", db, "--provider", "http://127.0.0.1:1", "--provider-events-secret-file", filepath.Join(dir, "none")}, exitRefused},
	} {
		code, _, stderr := runCmd(t, "", c.args...)
		if code != c.code || strings.Contains(stderr, "hunter2") || strings.Contains(stderr, "listening on") {
			t.Errorf("%q: code %d, want %d; stderr:\n%s", c.args, code, c.code, stderr)
		}
	}
}

// noWindows are the retention windows of a test that retires records
// within seconds: no client, queue, reconciliation or restored backup
// sends a request again later.
var noWindows = []string{"--client-retry-window", "0s", "--queue-backlog-window", "0s", "--reconciliation-window", "0s", "--restore-window", "0s"}

// serveExit runs "idem serve --addr 127.0.0.1:0 args…", which must exit
// without listening, and returns its exit code and stderr; a server that
// starts instead is stopped and fails the test at once.
func serveExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs, done := newLogWatch(), make(chan int, 1)
	args = append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, stdio{in: strings.NewReader(""), out: io.Discard, err: logs}) }()
	select {
	case code := <-done:
		return code, logs.String()
	case <-logs.addr:
		cancel()
		<-done
		t.Fatalf("%q started instead of refusing:\n%s", args, logs)
		return 0, ""
	}
}

// TestServeRetentionWindows: "idem serve" refuses to start (exit 2, the
// reason on stderr, never listening) when --retention is shorter than any
// of the four windows, the defaults included, and starts when it covers
// the longest.
// Proves threat:restored-backup (docs/threat-model.md).
func TestServeRetentionWindows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "x.db")
	for _, c := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"--retention", "1h"}, "--retention 1h0m0s is shorter than --client-retry-window 24h0m0s"},
		{[]string{"--retention", "23h59m"}, "shorter than --client-retry-window 24h0m0s"},
		{[]string{"--retention", "1h", "--client-retry-window", "1h", "--reconciliation-window", "1h", "--restore-window", "1h",
			"--queue-backlog-window", "90m"}, "shorter than --queue-backlog-window 1h30m0s"},
		{[]string{"--reconciliation-window", "48h"}, "--retention 24h0m0s is shorter than --reconciliation-window 48h0m0s"},
		{[]string{"--retention", "168h", "--restore-window", "169h"}, "shorter than --restore-window 169h0m0s"},
		{append([]string{"--retention", "1s", "--restore-window", "2s"}, noWindows[:6]...), "shorter than --restore-window 2s"},
		{[]string{"--queue-backlog-window", "-1s"}, "--queue-backlog-window must not be negative"},
	} {
		code, stderr := serveExit(t, append([]string{"--db", db}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "listening on") {
			t.Errorf("%q: code %d, want %d and %q; stderr:\n%s", c.args, code, exitUsage, c.want, stderr)
		}
	}
	// Covering the longest window starts the server: equal, longer, or
	// every window 0.
	for _, args := range [][]string{
		{"--retention", "168h", "--restore-window", "168h"},
		{"--retention", "2h", "--client-retry-window", "2h", "--queue-backlog-window", "2h", "--reconciliation-window", "1h", "--restore-window", "0s"},
		append([]string{"--retention", "1s"}, noWindows...),
	} {
		s := startServe(t, append([]string{"--db", db}, args...)...)
		s.stop(t)
	}
}
