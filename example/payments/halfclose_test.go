package payments

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestHalfClosingClients: 40 clients that each send a payment over a real
// TCP connection and then half-close it (CloseWrite: net/http then takes
// the client for gone and cancels the request's context) get no 503, and
// the service's metrics count no storage trouble (no store_unavailable or
// store_error outcome): a client going away before its request is
// accepted is 499 CLIENT_GONE, counted as client_gone. Nothing is lost,
// in either integration style: each key's retry replays the 201 its
// client got, or executes once if its client got none (after the lease,
// should a reservation have been left to it), and there is exactly one
// payment per key. Without
// the middleware's check of the request's context (refuseErr →
// clientGone) the store call that the cancellation failed is answered
// 503 STORE_UNAVAILABLE and counted as storage trouble.
// threat:client-gone-store-outage
func TestHalfClosingClients(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"SQLite", "Postgres"} {
		for _, oneTx := range []bool{false, true} {
			t.Run(driver+"/"+map[bool]string{false: "two-phase", true: "one-transaction"}[oneTx], func(t *testing.T) {
				t.Parallel()
				dsn := testDrivers[driver](t) // a fresh database each
				testHalfClosing(t, driver, setupConfig(t, dsn, Config{OneTransaction: oneTx, Lease: 2 * time.Second}))
			})
		}
	}
}

func testHalfClosing(t *testing.T, driver string, b *testBundle) {
	{
		const n = 40
		type answer struct {
			status int
			body   []byte
			code   idem.Code
		}
		answers := make([]answer, n)
		body := func(i int) string { return fmt.Sprintf(`{"amount":"%d.00","currency":"EUR","payee":"half"}`, i+1) }
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				resp, rb, err := halfClosedPost(b.srv.Listener.Addr().String(), "/v1/payments", "tok-alice", testKey(fmt.Sprint("half-", i)), body(i))
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				a := answer{status: resp.StatusCode, body: rb}
				if resp.Header.Get("Content-Type") == "application/problem+json" {
					var p struct{ Code idem.Code }
					json.Unmarshal(rb, &p)
					a.code = p.Code
				}
				answers[i] = a
			})
		}
		wg.Wait()
		counts := map[string]int{}
		for i, a := range answers {
			counts[fmt.Sprint(a.status, " ", a.code)]++
			switch {
			case a.status == http.StatusCreated:
			case a.status == 499 && a.code == "CLIENT_GONE":
			default:
				t.Errorf("client %d: %d %s %s", i, a.status, a.code, a.body)
			}
		}
		t.Logf("%s: answers %v", driver, counts)

		metrics := b.do(t, http.MethodGet, "/metrics", "", "", "")
		outcomes := map[string]int{}
		for _, m := range regexp.MustCompile(`idem_requests_total\{[^}]*outcome="([a-z_]+)"[^}]*\} (\d+)`).FindAllStringSubmatch(string(metrics.body), -1) {
			v, _ := strconv.Atoi(m[2])
			outcomes[m[1]] += v
		}
		t.Logf("%s: idem_requests_total by outcome %v", driver, outcomes)
		for _, bad := range []string{"store_unavailable", "store_error"} {
			if outcomes[bad] != 0 {
				t.Errorf("%d requests counted as %s", outcomes[bad], bad)
			}
		}
		if got, want := outcomes["client_gone"], counts["499 CLIENT_GONE"]; got != want {
			t.Errorf("client_gone counted %d times, %d clients got 499", got, want)
		}

		// Nothing lost, nothing doubled: each key's retry replays what its
		// client got, or executes once — after the lease, if a reservation
		// was left to it.
		leased := 0
		for i, a := range answers {
			r := b.post(t, "tok-alice", fmt.Sprint("half-", i), body(i))
			for deadline := time.Now().Add(30 * time.Second); r.code() == idem.CodeInProgress && time.Now().Before(deadline); {
				leased++
				select { // poll until the lease expires and the retry takes it over
				case <-time.After(100 * time.Millisecond):
				case <-t.Context().Done():
					return
				}
				r = b.post(t, "tok-alice", fmt.Sprint("half-", i), body(i))
			}
			switch {
			case r.status != http.StatusCreated:
				t.Errorf("retry %d: %v", i, r)
			case a.status == http.StatusCreated && !bytes.Equal(r.body, a.body):
				t.Errorf("retry %d: %s, its client got %s", i, r.body, a.body)
			}
		}
		if got := countPayments(t, b.store); got != n {
			t.Errorf("%d payments for %d keys", got, n)
		}
		t.Logf("%s: %d retries waited for a reservation's lease", driver, leased)
	}
}

// halfClosedPost sends a POST of body to path on addr, as token with the
// Idempotency-Key key, over a new TCP connection, half-closes the
// connection (CloseWrite) right after the request and reads the answer.
func halfClosedPost(addr, path, token, key, body string) (*http.Response, []byte, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, nil, err
	}
	req := "POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + token +
		"\r\nIdempotency-Key: " + key + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, nil, err
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return resp, rb, err
}
