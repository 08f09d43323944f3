package idemhttp

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/idemkit/idem"
)

// ProblemListener returns a listener whose connections answer in
// application/problem+json the requests that net/http refuses itself,
// before any handler runs: header fields too large (431
// HEADERS_TOO_LARGE), a malformed request line, header or Host (400
// MALFORMED_REQUEST), an unsupported transfer coding (501
// UNSUPPORTED_TRANSFER_ENCODING) and an unsupported HTTP version (505
// HTTP_VERSION_UNSUPPORTED).
//
// It also refuses a request that carries both Content-Length and
// Transfer-Encoding, which net/http would serve (Transfer-Encoding wins)
// on a connection it keeps open: RFC 9112 §6.3 calls such a message a
// possible smuggling attempt that a server must refuse, or close the
// connection after. A connection follows the framing of the requests its
// client sends (framing.go) and makes net/http refuse that one before
// reading its body — 400 MALFORMED_REQUEST, Connection: close — so
// nothing pipelined behind it is served. That refusal is rewritten
// wherever it comes on the connection, not only as its first answer.
//
// It is hand-written because net/http has no hook for these refusals: the
// server writes its text/plain answer straight to the connection. So a
// connection recognises exactly that answer — the first Write on the
// connection, which is one complete "HTTP/1.1 <status> <text>" response
// with only the headers "Content-Type: text/plain; charset=utf-8" and
// "Connection: close" and a body that is net/http's own text for that
// status — and replaces it with a problem of the same status, with
// Content-Length, Cache-Control: no-store and Connection: close. Anything
// else passes through unchanged: every Write after the first (but the
// refusal of a request with both framings, below), and every
// handler response that is not byte for byte net/http's own refusal
// (net/http adds a Date header to handler responses, which the fixed form
// lacks; only a handler that deletes Date and copies the refusal exactly
// could be mistaken for net/http, and gets the equivalent problem). A refusal on a keep-alive connection that already carried a
// response therefore keeps net/http's text/plain form: the wrapper cannot
// tell where the earlier response ended. The 417 net/http answers to an
// Expect other than 100-continue is a regular response and passes through
// too.
//
// Connections that are *tls.Conn are returned unwrapped (net/http must see
// them to serve TLS): on them neither the rewriting nor the refusal of
// both framings applies. A connection whose first byte cannot start an
// HTTP/1.x request (TLS under the wrapper, HTTP/2's preface is caught at
// its first line) is not followed either. The returned listener is safe for concurrent use, as
// l is.
func ProblemListener(l net.Listener) net.Listener { return problemListener{l} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if _, ok := c.(*tls.Conn); ok {
		return c, nil
	}
	return &problemConn{Conn: c, f: newFramer()}, nil
}

// problemConn rewrites net/http's own refusal, if it is the first Write,
// and refuses a request with both Content-Length and Transfer-Encoding
// (framer).
type problemConn struct {
	net.Conn
	wrote    atomic.Bool // a Write (or ReadFrom) happened
	conflict atomic.Bool // the framer refused a request: its 400 is rewritten wherever it comes

	rmu     sync.Mutex // guards the reading side below
	f       *framer
	buf     []byte // what was read from Conn
	pending []byte // what the framer gave and Read has not returned yet
	rerr    error  // Conn's read error that came with pending, returned once pending is empty
}

// Read returns the client's bytes as the framer passes them on.
func (c *problemConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		if err := c.rerr; err != nil {
			c.rerr = nil // once: net/http's own past deadline (abortPendingRead) is not the end
			return 0, err
		}
		if c.f.off {
			return c.Conn.Read(p)
		}
		if c.buf == nil {
			c.buf = make([]byte, 4096)
		}
		n, err := c.Conn.Read(c.buf)
		c.pending = c.f.feed(c.pending[:0], c.buf[:n])
		if c.f.injected {
			c.conflict.Store(true)
		}
		if len(c.pending) == 0 && err != nil {
			return 0, err
		}
		c.rerr = err
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *problemConn) Write(p []byte) (int, error) {
	if c.wrote.Swap(true) && !c.conflict.Load() {
		return c.Conn.Write(p)
	}
	resp, ok := rewriteRefusal(p, c.conflict.Load())
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(resp); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrom keeps the sendfile path of the underlying connection.
func (c *problemConn) ReadFrom(r io.Reader) (int64, error) {
	c.wrote.Store(true)
	return io.Copy(c.Conn, r)
}

// CloseWrite half-closes the connection, as net/http does after a 431 so
// that the client can read the answer before the connection goes.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serverRefusals maps the statuses net/http answers before any handler
// runs to their code and a detail for when net/http gives no text.
var serverRefusals = map[int]struct {
	code   idem.Code
	detail string
}{
	http.StatusBadRequest:                  {idem.CodeMalformedRequest, "the request line or a header field is malformed"},
	http.StatusRequestHeaderFieldsTooLarge: {idem.CodeHeadersTooLarge, "the request's header fields exceed the server's limit"},
	http.StatusNotImplemented:              {idem.CodeUnsupportedTransferEncoding, "the request's transfer coding is not supported"},
	http.StatusHTTPVersionNotSupported:     {idem.CodeHTTPVersionUnsupported, "the request's HTTP version is not supported"},
}

// serverErrorHeaders are the header lines (with the blank line) net/http
// writes with its own refusals (net/http/server.go, errorHeaders).
const serverErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// rewriteRefusal returns the problem+json response for p if p is exactly
// one of net/http's own refusals: "HTTP/1.1 " + line + serverErrorHeaders
// + body, where line is "<status> <status text>" optionally followed by
// ": <text>", and body is line itself (or, for 501, "Unsupported transfer
// encoding").
//
// conflict says that the framer refused a request on the connection: a
// bare 400 is then that refusal, and says so.
func rewriteRefusal(p []byte, conflict bool) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok {
		return nil, false
	}
	line, body, ok := bytes.Cut(rest, []byte(serverErrorHeaders))
	if !ok || len(line) < 5 || line[3] != ' ' {
		return nil, false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || line[0] < '1' || line[0] > '9' {
		return nil, false
	}
	refusal, ok := serverRefusals[status]
	if !ok {
		return nil, false
	}
	reason, text, hasText := bytes.Cut(line[4:], []byte(": "))
	if string(reason) != http.StatusText(status) || (hasText && !printable(text)) {
		return nil, false
	}
	if !bytes.Equal(body, line) && (status != http.StatusNotImplemented || hasText || string(body) != "Unsupported transfer encoding") {
		return nil, false
	}
	detail := refusal.detail
	switch {
	case hasText:
		detail = string(text) // net/http's own fixed text, e.g. "invalid header value"
	case conflict && status == http.StatusBadRequest:
		detail = "the request has both Content-Length and Transfer-Encoding (RFC 9112 §6.3); it was not read and the connection is closed"
	}
	_, pbody := Problem{Code: refusal.code, Detail: detail}.Marshal()
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	b.WriteString("Content-Type: application/problem+json\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(pbody)) + "\r\n")
	b.WriteString("Cache-Control: no-store\r\n")
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(pbody)
	return b.Bytes(), true
}

// printable reports whether s is non-empty visible ASCII and spaces.
func printable(s []byte) bool {
	for _, c := range s {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return len(s) > 0
}
