package payments

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// testDoors: requests no route matches answer problem+json — 404
// NOT_FOUND for an unknown path, 405 METHOD_NOT_ALLOWED with Allow for a
// known path with another method — and /readyz tells liveness from
// readiness: 200 while all is well, 503 with the reason while draining and
// once fenced, while /healthz stays 200.
func testDoors(t *testing.T, b *testBundle) {
	problem := func(r response, status int, code idem.Code) {
		t.Helper()
		var p struct{ Code idem.Code }
		if r.status != status || r.header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal(r.body, &p) != nil || p.Code != code {
			t.Errorf("got %v (Content-Type %q); want %d problem+json %s", r, r.header.Get("Content-Type"), status, code)
		}
	}
	problem(b.do(t, http.MethodGet, "/nope", "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
	put := b.do(t, http.MethodPut, "/v1/payments", "tok-alice", "", `{}`)
	problem(put, http.StatusMethodNotAllowed, CodeMethodNotAllowed)
	if allow := put.header.Get("Allow"); !strings.Contains(allow, "POST") || !strings.Contains(allow, "GET") {
		t.Errorf("405 Allow %q; want GET and POST", allow)
	}
	if r := b.do(t, http.MethodGet, "/readyz", "", "", ""); r.status != http.StatusOK || string(r.body) != `{"status":"ready"}` {
		t.Errorf("readyz: %v", r)
	}
	if err := b.store.SetDraining(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	problem(b.do(t, http.MethodGet, "/readyz", "", "", ""), http.StatusServiceUnavailable, idem.CodeDraining)
	if r := b.do(t, http.MethodGet, "/healthz", "", "", ""); r.status != http.StatusOK {
		t.Errorf("healthz while draining: %v; want 200 (alive, not ready)", r)
	}
	if err := b.store.SetDraining(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.BumpEpoch(t.Context()); err != nil {
		t.Fatal(err)
	}
	problem(b.do(t, http.MethodGet, "/readyz", "", "", ""), http.StatusServiceUnavailable, idem.CodeWriterFenced)
}

// TestNoRedirects: a path that is not in its clean form — the ones the
// mux would answer with 307 and a text/html body, as //v1/payments — is
// 404 NOT_FOUND in problem+json for every method, with no Location; a
// POST to one records and executes nothing. Sent over a raw connection,
// so no client cleans or follows anything. Without the service's clean
// path check (Handler, cleanPath) the mux's 307 goes out.
// threat:path-cleaning-redirect
func TestNoRedirects(t *testing.T) {
	t.Parallel()
	b := setup(t, testDrivers["SQLite"](t))
	addr := b.srv.Listener.Addr().String()
	body := `{"amount":"1.00","currency":"EUR","payee":"a"}`
	for _, p := range []string{
		"//v1/payments", "/v1/../v1/payments", "/v1/./payments", "/v1//payments", "/v1/payments/.",
		"//v1/payments?x=1", "/v1/payments/pay_x/../pay_x", "//", "/./", "/v1/payments/", "/v1/operations/",
		"/v1/payments/pay_x/refunds/..",
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodHead} {
			req := method + " " + p + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer tok-alice\r\n" +
				"Idempotency-Key: " + testKey("redirect-"+method+p) + "\r\nConnection: close\r\n"
			if method == http.MethodPost {
				req += "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			} else {
				req += "\r\n"
			}
			resp, rb := rawExchange(t, addr, req, method)
			var prob struct{ Code idem.Code }
			if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" ||
				resp.Header.Get("Location") != "" || (method != http.MethodHead && (json.Unmarshal(rb, &prob) != nil || prob.Code != CodeNotFound)) {
				t.Errorf("%s %s: %d %v %q; want 404 problem+json NOT_FOUND without Location", method, p, resp.StatusCode, resp.Header, rb)
			}
		}
	}
	if n := countPayments(t, b.store); n != 0 {
		t.Errorf("%d payments created through unclean paths", n)
	}
}

// rawExchange sends req over a new TCP connection to addr and reads one
// answer to method.
func rawExchange(t *testing.T, addr, req, method string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, rb
}
