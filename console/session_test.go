package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
)

// TestSessionExpiry: a session lasts 12 h after login. A second before
// it ends the status page answers and a form is accepted; a second
// after, the status page redirects (303) to the login page and a form
// with the session's CSRF token is redirected there too, without
// changing the registry (drain stays off).
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		var at atomic.Pointer[time.Time] // the console's clock; nil: time.Now
		console.SetClock(e.h, func() time.Time {
			if p := at.Load(); p != nil {
				return *p
			}
			return time.Now()
		})
		set := func(t time.Time) { at.Store(&t) }
		draining := func() bool {
			t.Helper()
			ctl, err := e.store.Control(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return ctl.Draining
		}

		// The session ends 12 h after the login, in whole seconds: not
		// before the second the login began in, not after it ended.
		before := time.Now()
		c, csrf := e.login(aliceToken)
		after := time.Now()
		const ttl = 12 * time.Hour

		set(before.Truncate(time.Second).Add(ttl - time.Second))
		if code, loc, body := e.do(c, "/admin/", nil); code != http.StatusOK || !strings.Contains(body, `id="operator">alice<`) {
			t.Fatalf("status page a second before the session ends: %d %q", code, loc)
		}
		// drain/off with drain already off: accepted (303 back to the
		// status page with a flash), and nothing changes.
		if code, loc, _ := e.do(c, "/admin/drain/off", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/?flash=") {
			t.Errorf("drain off a second before the session ends: %d %q; want 303 to the status page", code, loc)
		}

		set(after.Add(ttl + time.Second))
		if code, loc, _ := e.do(c, "/admin/", nil); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("status page a second after the session ended: %d %q; want 303 to /admin/login", code, loc)
		}
		if code, loc, _ := e.do(c, "/admin/drain/on", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("drain on a second after the session ended: %d %q; want 303 to /admin/login", code, loc)
		}
		if draining() {
			t.Errorf("drain on with an expired session turned drain on")
		}
	})
}
