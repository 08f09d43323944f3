package console_test

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Operator tokens of the tests' operators file.
const (
	aliceToken = "op-alice-7f3cQ2x7Kp9LmZ4vR8tW" // show_responses
	bobToken   = "op-bob-91adHd3sF6gJ0aK9wE2rU7" // metadata only
	apiToken   = "demo"                          // an API token: not an operator's
)

// opKind is the operation kind the tests' effect.Set settles.
const opKind = "tests.transfer"

// provider is the downstream of the tests' effect: it answers every
// lookup with answer and counts nothing else (the console never sends).
type provider struct{ answer effect.Answer }

func (p provider) Send(context.Context, string, []byte) effect.Answer {
	return effect.Answer{Detail: "the console must not send"}
}
func (p provider) Lookup(_ context.Context, key string) effect.Answer { return p.answer }

// env is one console on one real store.
type env struct {
	t     *testing.T
	store registry.Store
	h     http.Handler // the console, as console.New returned it
	srv   *httptest.Server
}

// stores runs fn once per driver, on a fresh database each, with the
// console served on it; answer is the provider's answer to lookups.
func stores(t *testing.T, answer effect.Answer, fn func(t *testing.T, e *env)) {
	pgtest.EachDriver(t, "console.db", func(t *testing.T, _, dsn string) {
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		fn(t, newEnv(t, store, answer))
	})
}

// newEnv serves the console on store, mounted at /admin, with the tests'
// operators and an effect.Set of opKind whose provider answers lookups
// with answer; each of with may change the Config.
func newEnv(t *testing.T, store registry.Store, answer effect.Answer, with ...func(*console.Config)) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "operators.json")
	os.WriteFile(path, []byte(`{"`+aliceToken+`": {"name": "alice", "show_responses": true}, "`+bobToken+`": {"name": "bob"}}`), 0o600)
	ops, err := console.LoadOperators(path)
	if err != nil {
		t.Fatal(err)
	}
	set := effect.Set{opKind: {
		Downstreams: map[string]effect.Downstream{"transfer": provider{answer}},
		Render: func(rec registry.Record, effs []registry.Effect) (registry.Outcome, error) {
			if effs[0].Result == registry.EffectFailed {
				return registry.Outcome{State: idem.StateFailedFinal, Response: idem.Response{Status: 422, MediaType: "application/json", Body: []byte(`{"code":"DECLINED"}`)}}, nil
			}
			return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "application/json",
				Body: []byte(`{"handle":"` + effs[0].Handle + `"}`)}}, nil
		},
	}}
	cfg := console.Config{Store: store, Effects: set, Operators: ops, Prefix: "/admin"}
	for _, f := range with {
		f(&cfg)
	}
	h, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, store: store, h: h, srv: srv}
}

// client is a browser without JavaScript: it keeps cookies and does not
// follow redirects, so tests see every 303.
func (e *env) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// do sends a GET (form nil) or a POST of form to path and returns the
// status, the Location and the body.
func (e *env) do(c *http.Client, path string, form url.Values) (int, string, string) {
	e.t.Helper()
	var resp *http.Response
	var err error
	if form == nil {
		resp, err = c.Get(e.srv.URL + path)
	} else {
		resp, err = c.PostForm(e.srv.URL+path, form)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// login logs in with token and returns the client and its CSRF token.
func (e *env) login(token string) (*http.Client, string) {
	e.t.Helper()
	c := e.client()
	if code, loc, body := e.do(c, "/admin/login", url.Values{"token": {token}}); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/?flash=") {
		e.t.Fatalf("login: %d %q %s", code, loc, body)
	}
	_, _, body := e.do(c, "/admin/", nil)
	return c, csrfOf(e.t, body)
}

var (
	csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	codeRe = regexp.MustCompile(`id="error" role="alert" data-code="([A-Z_]+)"`)
)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf field in %s", body)
	}
	return m[1]
}

// errorCode returns the data-code of the page's #error, "" if none.
func errorCode(body string) string {
	if m := codeRe.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// unknown makes an UNKNOWN operation of opKind through the registry:
// Reserve, BeginEffect, MarkUnknown.
func (e *env) unknown() registry.Record {
	e.t.Helper()
	ctx := e.t.Context()
	c := registry.Claim{Operation: opKind}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rec, _, err := e.store.Reserve(ctx, c)
	if err == nil {
		if _, err = e.store.BeginEffect(ctx, rec, "transfer", []byte(`{"amount":"1.00","secret":"request-payload-7731"}`)); err == nil {
			rec, err = e.store.MarkUnknown(ctx, rec)
		}
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// state reads the state of operation id.
func (e *env) state(id string) idem.State {
	e.t.Helper()
	rec, err := e.store.GetByID(e.t.Context(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec.State
}
