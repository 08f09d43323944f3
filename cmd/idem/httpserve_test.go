package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startHTTP runs serveUntilDone for srv on a fresh local port and returns
// the address; the server is stopped (and must exit cleanly) at cleanup.
func startHTTP(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- serveUntilDone(ctx, slog.New(slog.DiscardHandler), "test", ln, srv) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("serveUntilDone exited %d", code)
		}
	})
	return ln.Addr().String()
}

// TestServeLimits: the serving commands' server refuses oversized header
// fields and malformed requests in problem+json (its listener is an
// idemhttp.ProblemListener), and has every client limit set.
// Proves threat:slow-clients (docs/threat-model.md).
// Proves threat:server-refusals-plain-text (docs/threat-model.md).
func TestServeLimits(t *testing.T) {
	t.Parallel()
	var srv http.Server
	setClientLimits(&srv)
	if srv.MaxHeaderBytes != maxHeaderBytes || srv.ReadHeaderTimeout != readHeaderTimeout ||
		srv.ReadTimeout != readTimeout || srv.IdleTimeout != idleTimeout {
		t.Errorf("limits: MaxHeaderBytes %d, ReadHeaderTimeout %v, ReadTimeout %v, IdleTimeout %v",
			srv.MaxHeaderBytes, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout)
	}
	own := http.Server{ReadHeaderTimeout: time.Second}
	if setClientLimits(&own); own.ReadHeaderTimeout != time.Second {
		t.Errorf("a server's own ReadHeaderTimeout was replaced by %v", own.ReadHeaderTimeout)
	}
	addr := startHTTP(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })})
	for _, tc := range []struct {
		name, raw, status, code string
	}{
		{"DEL byte in a header value", "POST / HTTP/1.1\r\nHost: a\r\nX-Bad: a\x7fb\r\n\r\n", "400", "MALFORMED_REQUEST"},
		{"1 MiB of header fields", "GET / HTTP/1.1\r\nHost: a\r\nX-Fill: " + strings.Repeat("f", 1<<20) + "\r\n\r\n", "431", "HEADERS_TOO_LARGE"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		go io.WriteString(c, tc.raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.Status[:3] != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(b), `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %s %v %s; want %s problem+json with %s", tc.name, resp.Status, resp.Header, b, tc.status, tc.code)
		}
	}
}

// TestServeCutsOffSlowHeaders: a client that sends its header fields one
// byte at a time, more slowly than the header timeout allows, is cut off.
// Proves threat:slow-clients (docs/threat-model.md).
func TestServeCutsOffSlowHeaders(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	addr := startHTTP(t, &http.Server{ReadHeaderTimeout: timeout,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })})
	// The server's timer starts when it accepts the connection, after
	// this instant (not necessarily before Dial returns).
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(start.Add(20 * time.Second))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(timeout / 10)
		defer tick.Stop()
		msg := "GET / HTTP/1.1\r\nHost: a\r\nX-Slow: " + strings.Repeat("s", 1000) // never ends in time
		for i := 0; i < len(msg); i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte{msg[i]}); err != nil {
				return // the server hung up
			}
		}
	}()
	b, err := io.ReadAll(c) // until the server closes the connection
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open after %v", time.Since(start))
	}
	if elapsed := time.Since(start); elapsed < timeout || elapsed > readHeaderTimeout/2 {
		t.Errorf("cut off after %v, want soon after the header timeout %v", elapsed, timeout)
	}
	// net/http either hangs up without a word or answers 400 (then in
	// problem+json); it never serves the request.
	if len(b) != 0 && !strings.HasPrefix(string(b), "HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\n") {
		t.Errorf("the server answered %q", b)
	}
}
