package console_test

import (
	"fmt"
	"net/http"
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
