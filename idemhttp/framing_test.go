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
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// framingServer serves, on a ProblemListener over real TCP, a handler
// that echoes each request's body (as "<method> <path> <body>") and
// counts its calls.
func framingServer(t *testing.T) (addr string, calls *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	calls = new(atomic.Int32)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	})}
	go srv.Serve(idemhttp.ProblemListener(ln))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), calls
}

// pipeline writes every request at once on one connection and reads the
// answers until the server closes it; it reports whether it was closed.
func pipeline(t *testing.T, addr string, reqs ...string) (answers []*http.Response, bodies []string, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(conn, strings.Join(reqs, "")) // the server may close before it read everything
	br := bufio.NewReader(conn)
	for range reqs {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
				t.Fatalf("reading answer %d: %v", len(answers)+1, err)
			}
			return answers, bodies, true
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers, bodies = append(answers, resp), append(bodies, string(b))
	}
	_, err = br.ReadByte() // the server closes the connection, or the deadline passes
	return answers, bodies, errors.Is(err, io.EOF) || isReset(err)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// TestConflictingFraming: a request with both Content-Length and
// Transfer-Encoding — in either order, any case, HTTP/1.1 or 1.0, first on
// its connection or after requests already answered — is refused with 400
// MALFORMED_REQUEST in problem+json, unread, and the connection is closed
// after it (RFC 9112 §6.3), so a request pipelined behind it is never
// served. Requests around it that frame their bodies one way only are
// served with their bodies intact, also when a body holds text that looks
// like the conflicting fields. Without the framer (problemConn.Read) the
// conflicting request is served and the one behind it too.
// threat:cl-te-smuggling
func TestConflictingFraming(t *testing.T) {
	addr, calls := framingServer(t)
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, c := range []struct{ name, head string }{
		{"CL then TE", "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"},
		{"TE then CL", "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"},
		{"lower case", "transfer-encoding: chunked\r\ncontent-length: 3\r\n"},
		{"another coding", "Content-Length: 3\r\nTransfer-Encoding: gzip, chunked\r\n"},
	} {
		for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
			before := calls.Load()
			req := "POST /conflict " + proto + "\r\nHost: x\r\n" + c.head + "\r\n" + "0\r\n\r\n" + smuggled
			answers, bodies, closed := pipeline(t, addr, req, smuggled)
			if len(answers) != 1 || !closed {
				t.Fatalf("%s %s: %d answers %q, closed %v; want one refusal, then the connection closed", c.name, proto, len(answers), bodies, closed)
			}
			requireFramingRefusal(t, c.name+" "+proto, answers[0], bodies[0])
			if n := calls.Load() - before; n != 0 {
				t.Errorf("%s %s: the handler ran %d times", c.name, proto, n)
			}
		}
	}

	// After answered requests on a keep-alive connection: a Content-Length
	// body that holds the fields' text, a chunked body with an extension
	// and a trailer, an empty line before a request, a Transfer-Encoding
	// continued on a folded line, then the conflict, then one more.
	lookalike := "a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\nb"
	before := calls.Load()
	answers, bodies, closed := pipeline(t, addr,
		"POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(lookalike))+"\r\n\r\n"+lookalike,
		"POST /two HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"\r\nGET /three HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /four HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
		"POST /conflict HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		smuggled)
	if len(answers) != 5 || !closed {
		t.Fatalf("keep-alive: %d answers %q, closed %v; want 4 served, one refusal, then the connection closed", len(answers), bodies, closed)
	}
	for i, want := range []string{"POST /one " + lookalike, "POST /two hello world", "GET /three ", "POST /four hi"} {
		if answers[i].StatusCode != http.StatusOK || bodies[i] != want {
			t.Errorf("keep-alive answer %d: %d %q, want 200 %q", i+1, answers[i].StatusCode, bodies[i], want)
		}
	}
	requireFramingRefusal(t, "keep-alive", answers[4], bodies[4])
	if n := calls.Load() - before; n != 4 {
		t.Errorf("keep-alive: the handler ran %d times, want 4", n)
	}

	// An Upgrade or CONNECT that no handler takes over is served as any
	// request, and the connection stays HTTP: a conflict behind it is
	// refused like any other (a framer that stopped looking at an
	// Upgrade let a client switch the check off).
	for _, first := range []string{
		"GET /upgrade HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
	} {
		answers, bodies, closed := pipeline(t, addr, first,
			"POST /conflict HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			smuggled)
		if len(answers) != 2 || !closed {
			t.Fatalf("after %.12q: %d answers %q, closed %v; want it answered, one refusal, then the connection closed", first, len(answers), bodies, closed)
		}
		requireFramingRefusal(t, "after "+first[:12], answers[1], bodies[1])
	}
}

func requireFramingRefusal(t *testing.T, name string, resp *http.Response, body string) {
	t.Helper()
	var p idemhttp.Problem
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!resp.Close || json.Unmarshal([]byte(body), &p) != nil ||
		p.Code != idem.CodeMalformedRequest || !strings.Contains(p.Detail, "Content-Length and Transfer-Encoding") {
		t.Errorf("%s: %d %v %q; want 400 MALFORMED_REQUEST problem+json naming both fields, Connection: close", name, resp.StatusCode, resp.Header, body)
	}
}
