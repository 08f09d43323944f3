package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// TestLoginThrottled: 20 wrong tokens from one address get 401 for the
// first ten and then 429 LOGIN_THROTTLED with a Retry-After; a right
// token from that address is refused the same way while it lasts (the
// answer reveals nothing), and is let in once Retry-After has passed.
// Every looked-at refusal is in the audit log (login.failed, with the
// address); the throttled ones are counted in one login.throttled entry,
// not written one by one. threat:console-token-guessing
func TestLoginThrottled(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		var at atomic.Int64 // the console's clock, unix nanoseconds
		at.Store(time.Now().UnixNano())
		console.SetClock(e.h, func() time.Time { return time.Unix(0, at.Load()) })

		var statuses []int
		retry := ""
		c := e.client()
		for i := range 20 {
			resp, err := c.PostForm(e.srv.URL+"/admin/login", url.Values{"token": {fmt.Sprintf("wrong-token-%02d-aaaaaaaaaaaaaaaaaaaa", i)}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			statuses = append(statuses, resp.StatusCode)
			if resp.StatusCode == http.StatusTooManyRequests {
				retry = resp.Header.Get("Retry-After")
			}
		}
		if statuses[0] != http.StatusUnauthorized || statuses[19] != http.StatusTooManyRequests {
			t.Fatalf("20 wrong logins answered %v; want 401 first and 429 at the end", statuses)
		}
		n401 := strings.Count(fmt.Sprint(statuses), "401")
		if n401 != 10 { // the clock stands still: the burst per address, exactly (docs/console.md)
			t.Errorf("%d of 20 wrong logins answered 401 before the throttle; want 10", n401)
		}
		secs, err := strconv.Atoi(retry)
		if err != nil || secs < 1 {
			t.Fatalf("429 with Retry-After %q; want whole seconds >= 1", retry)
		}

		code, _, body := e.do(c, "/admin/login", url.Values{"token": {aliceToken}})
		if code != http.StatusTooManyRequests || errorCode(body) != console.CodeLoginThrottled {
			t.Fatalf("a right token while throttled: %d %q; want 429 %s", code, errorCode(body), console.CodeLoginThrottled)
		}

		acts, entries := e.actions("")
		failed, throttled := 0, 0
		for i, a := range acts {
			switch a {
			case registry.AuditLoginFailed + " " + registry.AuditActorUnknown:
				failed++
				if !strings.Contains(entries[i].Detail, "127.0.0.1") {
					t.Errorf("login.failed detail %q does not name the address", entries[i].Detail)
				}
			case registry.AuditLoginThrottled + " " + registry.AuditActorUnknown:
				throttled++
			}
		}
		if failed != n401 || throttled != 1 {
			t.Errorf("audit log has %d login.failed (want %d, one per 401) and %d login.throttled (want 1): %v", failed, n401, throttled, acts)
		}

		at.Add(int64(time.Duration(secs) * time.Second))
		if code, loc, _ := e.do(c, "/admin/login", url.Values{"token": {aliceToken}}); code != http.StatusSeeOther {
			t.Errorf("a right token after Retry-After: %d %q; want 303", code, loc)
		}
	})
}

// TestLoginThrottledAcrossSources: guesses spread over many addresses,
// each well under its own limit, still empty the console-wide bucket (the
// per-operator one: a guess is a guess at every operator's token), after
// which a fresh address — a right token included — gets 429 too.
// threat:console-token-guessing
func TestLoginThrottledAcrossSources(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		var at atomic.Int64
		at.Store(time.Now().UnixNano())
		console.SetClock(e.h, func() time.Time { return time.Unix(0, at.Load()) })
		post := func(addr, tok string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.RemoteAddr = addr
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, r)
			return w
		}
		first429 := -1
		for i := range 150 {
			w := post(fmt.Sprintf("10.0.%d.%d:4000", i/250, i%250+1), fmt.Sprintf("guess-%03d-Zr4kW9pQ2mX7vT1nB8yL5c", i))
			if w.Code == http.StatusTooManyRequests && first429 < 0 {
				first429 = i
			}
		}
		if first429 < 0 {
			t.Fatal("150 wrong logins from 150 addresses: never 429")
		}
		if first429 != 100 { // the clock stands still: the console-wide burst, exactly (docs/console.md)
			t.Errorf("the console-wide limit hit after %d guesses; want 100", first429)
		}
		if w := post("10.9.9.9:4000", aliceToken); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("a right token from a fresh address while the console is throttled: %d; want 429 with Retry-After", w.Code)
		}
	})
}
