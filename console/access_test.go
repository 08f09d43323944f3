package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem/effect"
)

// TestAccess: pages need a session; an operator token logs in, an API
// token does not; logout ends the session; the cookie is HttpOnly,
// SameSite=Strict and scoped to the prefix.
func TestAccess(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		c := e.client()
		for _, path := range []string{"/admin/", "/admin/operations", "/admin/operations/op_x", "/admin/nothing"} {
			if code, loc, _ := e.do(c, path, nil); code != http.StatusSeeOther || loc != "/admin/login" {
				t.Errorf("GET %s without a session: %d %q; want 303 to /admin/login", path, code, loc)
			}
		}
		if code, loc, _ := e.do(c, "/admin/drain/on", url.Values{"confirm": {"yes"}}); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("POST drain/on without a session: %d %q", code, loc)
		}
		// Every answer, page or redirect, carries the security headers
		// docs/console.md lists.
		for _, path := range []string{"/admin/login", "/admin/"} {
			resp, err := c.Get(e.srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for h, want := range map[string]string{
				"Content-Security-Policy": "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'",
				"Cache-Control":           "no-store",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("GET %s: %s %q; want %q", path, h, got, want)
				}
			}
		}
		code, _, body := e.do(c, "/admin/login", nil)
		if code != http.StatusOK || !strings.Contains(body, `<form id="login" method="post" action="/admin/login">`) ||
			!strings.Contains(body, `name="token" type="password"`) || !strings.Contains(body, `id="login-submit"`) {
			t.Errorf("login page: %d %s", code, body)
		}
		for _, tok := range []string{apiToken, "", aliceToken + "x"} {
			if code, _, body := e.do(c, "/admin/login", url.Values{"token": {tok}}); code != http.StatusUnauthorized || errorCode(body) != "UNAUTHENTICATED" {
				t.Errorf("login with %q: %d %q", tok, code, errorCode(body))
			}
		}
		if code, loc, _ := e.do(c, "/admin/", nil); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("after refused logins: %d %q", code, loc)
		}

		resp, err := c.PostForm(e.srv.URL+"/admin/login", url.Values{"token": {bobToken}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ck := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode ||
			ck[0].Path != "/admin" || ck[0].MaxAge != 12*3600 {
			t.Fatalf("login: %d, cookies %+v", resp.StatusCode, ck)
		}
		code, _, body = e.do(c, resp.Header.Get("Location"), nil)
		if code != http.StatusOK || !strings.Contains(body, `id="operator">bob<`) || !strings.Contains(body, `id="flash"`) ||
			!strings.Contains(body, `id="nav-status" href="/admin/"`) || !strings.Contains(body, `id="nav-operations" href="/admin/operations"`) {
			t.Errorf("status page after login: %d %s", code, body)
		}
		// A forged flash is not shown.
		if _, _, body := e.do(c, "/admin/?flash=provider+says+executed", nil); strings.Contains(body, `id="flash"`) {
			t.Errorf("a flash that is not signed was shown: %s", body)
		}
		// A tampered cookie is no session.
		tampered := e.client()
		u, _ := url.Parse(e.srv.URL + "/admin/")
		tampered.Jar.SetCookies(u, []*http.Cookie{{Name: ck[0].Name, Value: strings.Replace(ck[0].Value, ck[0].Value[:4], "YWxp", 1), Path: "/admin"}})
		if code, _, _ := e.do(tampered, "/admin/", nil); code != http.StatusSeeOther {
			t.Errorf("tampered cookie: %d; want 303", code)
		}

		csrf := csrfOf(t, body)
		if code, _, body := e.do(c, "/admin/logout", url.Values{}); code != http.StatusForbidden || errorCode(body) != "CSRF_INVALID" {
			t.Errorf("logout without csrf: %d %q", code, errorCode(body))
		}
		if code, loc, _ := e.do(c, "/admin/logout", url.Values{"csrf": {csrf}}); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/login") {
			t.Errorf("logout: %d %q", code, loc)
		}
		if code, loc, _ := e.do(c, "/admin/", nil); code != http.StatusSeeOther || loc != "/admin/login" {
			t.Errorf("after logout: %d %q", code, loc)
		}
	})
}
