package provider

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// waitIdle waits until no request is held.
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.waitLocked(ctx, func() bool { return s.hung == 0 }); err != nil {
		t.Fatalf("%d requests still held: %v", s.hung, err)
	}
}

func waitHung(t *testing.T, s *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.WaitHung(ctx, n); err != nil {
		t.Fatalf("waiting for %d held requests (%d held): %v", n, s.Hung(), err)
	}
}

func TestProviderFailMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.post(t, "before", body1)
	b.control(t, ModeFail)
	for _, key := range []string{"new", "before"} {
		resp, out := b.post(t, key, body1)
		wantProblem(t, "fail mode "+key, resp, out, http.StatusServiceUnavailable, "PROVIDER_FAILURE")
	}
	if resp, _ := b.do(t, http.MethodGet, "/transfers/new", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET after fail: %d", resp.StatusCode)
	}
	if n := b.stats(t); n != 1 {
		t.Errorf("executed %d after fail mode, want 1", n)
	}
	b.control(t, ModeOK)
	if resp, _ := b.post(t, "new", body1); resp.StatusCode != http.StatusCreated || b.stats(t) != 2 {
		t.Errorf("ok after fail: %d", resp.StatusCode)
	}
}

func TestProviderControl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ body, code string }{
		{`{"mode":"sometimes"}`, "MODE_INVALID"},
		{`{}`, "MODE_INVALID"},
		{`{"mode":`, "INVALID_JSON"},
	} {
		resp, out := b.do(t, http.MethodPost, "/control", "", c.body)
		wantProblem(t, c.body, resp, out, http.StatusBadRequest, c.code)
	}
	b.control(t, ModeHangBefore)
	if resp, out := b.do(t, http.MethodGet, "/control", "", ""); resp.StatusCode != http.StatusOK || string(out) != `{"mode":"hang-before","hung":0}` {
		t.Errorf("GET /control: %d %s", resp.StatusCode, out)
	}
	resp, out := b.do(t, http.MethodGet, "/control?wait_hung=x", "", "")
	wantProblem(t, "wait_hung=x", resp, out, http.StatusBadRequest, "INVALID_QUERY")
	held := make(chan error, 1)
	go func() {
		_, _, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", "w", body1)
		held <- err
	}()
	if resp, out := b.do(t, http.MethodGet, "/control?wait_hung=1", "", ""); resp.StatusCode != http.StatusOK || string(out) != `{"mode":"hang-before","hung":1}` {
		t.Errorf("GET /control?wait_hung=1: %d %s", resp.StatusCode, out)
	}
	b.control(t, ModeOK)
	if err := <-held; err != nil {
		t.Error(err)
	}
	if _, err := ParseMode("HANG"); err == nil {
		t.Error("ParseMode accepted HANG")
	}
	if err := b.srv.SetMode("off"); err == nil || b.srv.Mode() != ModeOK {
		t.Errorf("SetMode(off): %v, mode %s", err, b.srv.Mode())
	}
}

// TestProviderHangTimeoutAfterEffect is the unknown outcome: the caller
// times out, yet the transfer was executed, and a retry with the same key
// finds it.
func TestProviderHangTimeoutAfterEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeHang)
	c := &http.Client{Timeout: 200 * time.Millisecond}
	if _, _, err := b.send(c, http.MethodGet, "/stats", "", ""); err != nil { // open the connection first
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := b.send(c, http.MethodPost, "/transfers", "lost", body1)
		done <- err
	}()
	waitHung(t, b.srv, 1)
	var ne net.Error
	if err := <-done; !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("client error %v, want a timeout", err)
	}
	waitIdle(t, b.srv) // the client left, so the held request ended
	resp, executed := b.do(t, http.MethodGet, "/transfers/lost", "", "")
	if resp.StatusCode != http.StatusOK || b.stats(t) != 1 {
		t.Fatalf("after the timeout: GET %d %s, executed %d", resp.StatusCode, executed, b.stats(t))
	}
	b.control(t, ModeOK)
	again, againBody := b.post(t, "lost", body1)
	if again.StatusCode != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" ||
		!bytes.Equal(againBody, executed) || b.stats(t) != 1 {
		t.Errorf("retry: %d %v %s, executed %d", again.StatusCode, again.Header, againBody, b.stats(t))
	}
}

func TestProviderHangReleasedByModeChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeHang)
	keys := []string{"h1", "h2", "h1"}
	answers := make(chan string, len(keys))
	for _, key := range keys {
		go func() {
			resp, out, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", key, body1)
			if err != nil {
				answers <- err.Error()
				return
			}
			answers <- resp.Status + " " + string(out)
		}()
	}
	waitHung(t, b.srv, len(keys))
	b.srv.SetMode(ModeHang) // the same mode again releases nothing
	if n := b.stats(t); n != 2 || b.srv.Hung() != len(keys) {
		t.Fatalf("while held: executed %d, held %d; want 2 and %d", n, b.srv.Hung(), len(keys))
	}
	b.control(t, ModeOK)
	for range keys {
		if a := <-answers; !strings.HasPrefix(a, "201 ") || !strings.Contains(a, `"status":"executed"`) {
			t.Errorf("released answer %s", a)
		}
	}
	waitIdle(t, b.srv)
}

func TestProviderHangBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.control(t, ModeHangBefore)
	answers := make(chan int, 2)
	for _, key := range []string{"x", "y"} {
		go func() {
			resp, _, err := b.send(b.ts.Client(), http.MethodPost, "/transfers", key, body1)
			if err != nil {
				answers <- 0
				return
			}
			answers <- resp.StatusCode
		}()
	}
	waitHung(t, b.srv, 2)
	if resp, _ := b.do(t, http.MethodGet, "/transfers/x", "", ""); resp.StatusCode != http.StatusNotFound || b.stats(t) != 0 {
		t.Fatalf("held before executing: GET %d, executed %d", resp.StatusCode, b.stats(t))
	}
	b.control(t, ModeFail) // released into fail mode: nothing executes
	for range 2 {
		if s := <-answers; s != http.StatusServiceUnavailable {
			t.Errorf("released into fail: %d", s)
		}
	}
	if n := b.stats(t); n != 0 {
		t.Errorf("executed %d after hang-before then fail", n)
	}

	// A client that leaves while held executes nothing.
	b.control(t, ModeHangBefore)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.ts.URL+"/transfers", strings.NewReader(body1))
	req.Header.Set("Idempotency-Key", "z")
	go func() {
		if resp, err := b.ts.Client().Do(req); err == nil {
			resp.Body.Close()
		}
		answers <- 0
	}()
	waitHung(t, b.srv, 1)
	cancel()
	<-answers
	waitIdle(t, b.srv)
	b.control(t, ModeOK)
	if n := b.stats(t); n != 0 {
		t.Errorf("executed %d after the client left", n)
	}
}
