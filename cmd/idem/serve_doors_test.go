package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeDoors: every answer of "idem serve" to a request no handler
// should take is problem+json: a request with both Content-Length and
// Transfer-Encoding is 400 MALFORMED_REQUEST and its connection is closed,
// so the POST pipelined behind it is never served (no payment exists
// afterwards); an unclean path (//v1/payments) is 404 NOT_FOUND, not the
// router's 307; an unknown path 404 and a known path with another method
// 405. All over raw TCP, so no client normalises anything.
// threat:cl-te-smuggling threat:path-cleaning-redirect
func TestServeDoors(t *testing.T) {
	t.Parallel()
	s := startServe(t, "--db", "sqlite:"+filepath.Join(t.TempDir(), "doors.db"))
	addr := strings.TrimPrefix(s.url, "http://")
	body := `{"amount":"1.00","currency":"EUR","payee":"a"}`
	post := func(key string) string {
		return "POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo\r\nIdempotency-Key: " + key +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	smuggling := "POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo\r\nIdempotency-Key: k-cl-te\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
	answers := exchange(t, addr, smuggling+post("k-behind"))
	if len(answers) != 1 {
		t.Fatalf("%d answers on the smuggling connection, want 1 and the connection closed", len(answers))
	}
	requireServeProblem(t, "Content-Length with Transfer-Encoding", answers[0], 400, "MALFORMED_REQUEST")
	if !answers[0].resp.Close {
		t.Errorf("the refusal does not close the connection: %v", answers[0].resp.Header)
	}
	list := exchange(t, addr, "GET /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo\r\nConnection: close\r\n\r\n")
	if len(list) != 1 || list[0].resp.StatusCode != 200 || strings.Contains(list[0].body, "pay_") {
		t.Errorf("payments after the refused connection: %+v; want none", list)
	}
	for _, c := range []struct {
		req    string
		status int
		code   string
	}{
		{"POST //v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo\r\nIdempotency-Key: k-dbl\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body, 404, "NOT_FOUND"},
		{"GET /v1/../v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo\r\nConnection: close\r\n\r\n", 404, "NOT_FOUND"},
		{"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, "NOT_FOUND"},
		{"DELETE /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo\r\nConnection: close\r\n\r\n", 405, "METHOD_NOT_ALLOWED"},
	} {
		answers := exchange(t, addr, c.req)
		if len(answers) != 1 {
			t.Fatalf("%q: %d answers", c.req, len(answers))
		}
		requireServeProblem(t, strings.SplitN(c.req, "\r\n", 2)[0], answers[0], c.status, c.code)
	}
	s.stop(t)
}

type rawAnswer struct {
	resp *http.Response
	body string
}

// exchange writes raw on a new connection to addr and reads answers until
// the server closes the connection.
func exchange(t *testing.T, addr, raw string) []rawAnswer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	go io.WriteString(c, raw)
	br := bufio.NewReader(c)
	var out []rawAnswer
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection stayed open after %d answers", len(out))
			}
			return out
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, rawAnswer{resp, string(b)})
	}
}

func requireServeProblem(t *testing.T, name string, a rawAnswer, status int, code string) {
	t.Helper()
	var p struct{ Code string }
	if a.resp.StatusCode != status || a.resp.Header.Get("Content-Type") != "application/problem+json" ||
		a.resp.Header.Get("Location") != "" || json.Unmarshal([]byte(a.body), &p) != nil || p.Code != code {
		t.Errorf("%s: %d %v %q; want %d problem+json %s", name, a.resp.StatusCode, a.resp.Header, a.body, status, code)
	}
}
