package idemhttp_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// problemServer serves h over real TCP on a ProblemListener, with header
// fields limited to 64 KiB, and returns its address.
func problemServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, MaxHeaderBytes: 64 << 10}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(idemhttp.ProblemListener(ln)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

type rawResponse struct {
	*http.Response
	body string
}

// exchange sends raw on a new connection (writing concurrently, so that a
// server that answers before reading everything is heard) and reads
// count responses.
func exchange(t *testing.T, addr, raw string, count int) []rawResponse {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	go io.WriteString(c, raw) // may fail once the server hangs up: it answered first
	br := bufio.NewReader(c)
	var out []rawResponse
	for range count {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading response %d: %v", len(out)+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("reading body %d: %v", len(out)+1, err)
		}
		out = append(out, rawResponse{resp, string(b)})
	}
	return out
}

// okHandler answers 201 to anything, or 400 in net/http's own words when
// the request has X-Refuse.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Refuse") != "" {
		// As close to net/http's own refusal as a handler gets.
		w.Header()["Date"] = nil
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(400)
		io.WriteString(w, "400 Bad Request")
		return
	}
	w.WriteHeader(201)
})

// checkProblem requires resp to be the problem+json rewrite of a net/http
// refusal: status, code, Connection: close, an exact Content-Length.
func checkProblem(t *testing.T, what string, resp rawResponse, status int, code string) {
	t.Helper()
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(resp.body), &p); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", what, resp.body, err)
	}
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" ||
		string(p.Code) != code || p.Status != status || p.Type != "about:blank" || p.Title != http.StatusText(status) || p.Detail == "" {
		t.Errorf("%s: %d %v %q; want %d problem+json with code %s", what, resp.StatusCode, resp.Header, resp.body, status, code)
	}
	if !resp.Close || resp.Header.Get("Content-Length") != strconv.Itoa(len(resp.body)) {
		t.Errorf("%s: Connection close %v, Content-Length %q for %d bytes", what, resp.Close, resp.Header.Get("Content-Length"), len(resp.body))
	}
}

// Proves threat:server-refusals-plain-text (docs/threat-model.md).
func TestProblemListenerMalformedHeader(t *testing.T) {
	t.Parallel()
	addr := problemServer(t, okHandler)
	// A DEL byte (0x7f) in a header value.
	resp := exchange(t, addr, "POST /x HTTP/1.1\r\nHost: a\r\nX-Bad: a\x7fb\r\nContent-Length: 0\r\n\r\n", 1)[0]
	checkProblem(t, "DEL in a header value", resp, 400, "MALFORMED_REQUEST")
	for name, raw := range map[string]string{
		"no Host":            "GET /x HTTP/1.1\r\n\r\n",
		"bad header name":    "GET /x HTTP/1.1\r\nHost: a\r\nX Bad: 1\r\n\r\n",
		"bad request line":   "GET\r\n\r\n",
		"two Content-Length": "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
	} {
		checkProblem(t, name, exchange(t, addr, raw, 1)[0], 400, "MALFORMED_REQUEST")
	}
}

// Proves threat:server-refusals-plain-text (docs/threat-model.md).
func TestProblemListenerHeadersTooLarge(t *testing.T) {
	t.Parallel()
	addr := problemServer(t, okHandler)
	raw := "GET /x HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Fill: "+strings.Repeat("f", 1014)+"\r\n", 1024) + "\r\n" // 1 MiB of header fields
	checkProblem(t, "1 MiB of header fields", exchange(t, addr, raw, 1)[0], 431, "HEADERS_TOO_LARGE")
}

// Proves threat:server-refusals-plain-text (docs/threat-model.md).
func TestProblemListenerTransferEncodingAndVersion(t *testing.T) {
	t.Parallel()
	addr := problemServer(t, okHandler)
	checkProblem(t, "Transfer-Encoding: gzip",
		exchange(t, addr, "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 1)[0], 501, "UNSUPPORTED_TRANSFER_ENCODING")
	checkProblem(t, "HTTP/3.0", exchange(t, addr, "GET /x HTTP/3.0\r\nHost: a\r\n\r\n", 1)[0], 505, "HTTP_VERSION_UNSUPPORTED")
}

// TestProblemListenerPassesHandlerResponses: responses a handler writes
// are never rewritten, not even a 400 that mimics net/http's own, and a
// refusal after a response on a keep-alive connection keeps net/http's
// form (documented: the wrapper cannot tell where that response ended).
// Proves threat:server-refusals-plain-text (docs/threat-model.md).
func TestProblemListenerPassesHandlerResponses(t *testing.T) {
	t.Parallel()
	addr := problemServer(t, okHandler)
	resp := exchange(t, addr, "GET /x HTTP/1.1\r\nHost: a\r\nX-Refuse: 1\r\n\r\n", 1)[0]
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || resp.body != "400 Bad Request" {
		t.Errorf("a handler's 400 was changed: %d %v %q", resp.StatusCode, resp.Header, resp.body)
	}
	rs := exchange(t, addr, "GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\nX-Bad: \x7f\r\n\r\n", 2)
	if rs[0].StatusCode != 201 || rs[1].StatusCode != 400 || rs[1].Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("keep-alive: %d, then %d %v %q", rs[0].StatusCode, rs[1].StatusCode, rs[1].Header, rs[1].body)
	}
}
