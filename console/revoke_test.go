package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
)

// withCookie returns a client that sends the session cookie value v.
func (e *env) withCookie(v string) *http.Client {
	c := e.client()
	u, _ := url.Parse(e.srv.URL + "/admin/")
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "idem_console", Value: v, Path: "/admin"}})
	return c
}

// sessionCookie returns the session cookie value c holds.
func (e *env) sessionCookie(c *http.Client) string {
	e.t.Helper()
	u, _ := url.Parse(e.srv.URL + "/admin/")
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == "idem_console" {
			return k.Value
		}
	}
	e.t.Fatal("no session cookie")
	return ""
}

// TestLogoutRevokes: after a logout, the old cookie — replayed by a
// client that kept it — redirects to the login page, though its
// signature and expiry are still good; another session of the same
// operator lives on. threat:console-session-after-logout
func TestLogoutRevokes(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		c, csrf := e.login(aliceToken)
		other, _ := e.login(aliceToken)
		old := e.sessionCookie(c)
		if code, _, _ := e.do(e.withCookie(old), "/admin/", nil); code != http.StatusOK {
			t.Fatalf("the cookie before logout: %d; want 200", code)
		}
		if code, loc, _ := e.do(c, "/admin/logout", url.Values{"csrf": {csrf}}); code != http.StatusSeeOther {
			t.Fatalf("logout: %d %q", code, loc)
		}
		if code, loc, _ := e.do(e.withCookie(old), "/admin/", nil); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("the old cookie after logout: %d %q; want 303 to /admin/login", code, loc)
		}
		if code, loc, _ := e.do(e.withCookie(old), "/admin/drain/on", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("a form with the old cookie after logout: %d %q; want 303 to /admin/login", code, loc)
		}
		if code, _, _ := e.do(other, "/admin/", nil); code != http.StatusOK {
			t.Errorf("alice's other session after one logout: %d; want 200", code)
		}
	})
}

// TestOperatorRemovedEndsSessions: new operators (a reloaded file)
// without bob end bob's session at once; alice given a new token under
// the same name loses the session of her old token; a bad operators set
// is refused and changes nothing. threat:console-session-after-removal
func TestOperatorRemovedEndsSessions(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		alice, _ := e.login(aliceToken)
		bob, _ := e.login(bobToken)
		if err := console.SetOperators(e.h, console.Operators{}); err == nil {
			t.Fatal("SetOperators with no operators: accepted")
		}
		if code, _, _ := e.do(bob, "/admin/", nil); code != http.StatusOK {
			t.Fatalf("bob after a refused SetOperators: %d; want 200", code)
		}
		const newAlice = "op-alice-new-Q2x7Kp9LmZ4vR8tW1yB6nD"
		if err := console.SetOperators(e.h, console.Operators{newAlice: {Name: "alice", ShowResponses: true}}); err != nil {
			t.Fatal(err)
		}
		if code, loc, _ := e.do(bob, "/admin/", nil); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("bob's session after his removal: %d %q; want 303 to /admin/login", code, loc)
		}
		if code, loc, _ := e.do(alice, "/admin/", nil); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("alice's session of her old token after a new one: %d %q; want 303 to /admin/login", code, loc)
		}
		if code, _, _ := e.do(e.client(), "/admin/login", url.Values{"token": {bobToken}}); code != http.StatusUnauthorized {
			t.Errorf("bob's removed token logs in: %d; want 401", code)
		}
		e.login(newAlice)
	})
}
