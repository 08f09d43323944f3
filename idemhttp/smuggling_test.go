package idemhttp_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// rawPost posts body to the fixture with hdr added line by line (Add, not
// Set: a name may repeat), as principal alice.
func (f *fixture) rawPost(body string, hdr ...string) result {
	f.t.Helper()
	req, _ := http.NewRequestWithContext(f.t.Context(), "POST", f.srv.URL+"/things", strings.NewReader(body))
	req.Header.Set("X-Principal", "alice")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

// TestSmugglingRefusals: requests a component behind the middleware might
// read differently from it — two Content-Type lines, two Idempotency-Key
// lines or a key list, JSON nested past the limit, a body past the limit —
// are refused with a stable code in problem+json, in both integration
// styles, before any record is written or the handler runs.
// Proves threat:oversized-bodies (docs/threat-model.md).
// Proves threat:deep-json (docs/threat-model.md).
// Proves threat:header-smuggling (docs/threat-model.md).
func TestSmugglingRefusals(t *testing.T) {
	for _, style := range styles {
		t.Run(style.name, func(t *testing.T) {
			stores(t, func(t *testing.T, store registry.Store) {
				f := newFixtureWith(t, store, idemhttp.Enforce, style.shape)
				json := []string{"Content-Type", "application/json"}
				cases := []struct {
					name, key, body string
					hdr             []string
					status          int
					code            string
				}{
					{"two Content-Type lines", "ct-two", `{}`, []string{"Content-Type", "application/json", "Content-Type", "text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"},
					{"two equal Content-Type lines", "ct-same", `{}`, []string{"Content-Type", "application/json", "Content-Type", "application/json"}, 415, "UNSUPPORTED_MEDIA_TYPE"},
					{"a Content-Type list", "ct-list", `{}`, []string{"Content-Type", "application/json, text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"},
					{"two Idempotency-Key lines", "key-two", `{}`, append([]string{"Idempotency-Key", "key-other"}, json...), 400, "KEY_MULTIPLE"},
					{"a key list", "", `{}`, append([]string{"Idempotency-Key", "key-a, key-b"}, json...), 400, "KEY_MULTIPLE"},
					{"nesting past the limit", "deep", strings.Repeat("[", 65) + strings.Repeat("]", 65), json, 400, "INVALID_JSON"},
					{"objects nested past the limit", "deep-obj", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), json, 400, "INVALID_JSON"},
					{"a body past the limit", "big", `{"a":"` + strings.Repeat("x", 1<<20) + `"}`, json, 413, "BODY_TOO_LARGE"},
				}
				for _, c := range cases {
					hdr := c.hdr
					if c.key != "" {
						hdr = append([]string{"Idempotency-Key", c.key}, hdr...)
					}
					r := f.rawPost(c.body, hdr...)
					if r.status != c.status || code(r) != c.code || r.header.Get("Content-Type") != "application/problem+json" {
						t.Errorf("%s: %d %s %s, want %d %s", c.name, r.status, code(r), r.header.Get("Content-Type"), c.status, c.code)
					}
					if c.key != "" {
						if _, err := store.Get(t.Context(), scopeOf(t, c.key)); err == nil {
							t.Errorf("%s: a record was written", c.name)
						}
					}
				}
				// Nesting at the limit is accepted: the refusal above is the limit's.
				if r := f.rawPost(strings.Repeat("[", 64)+strings.Repeat("]", 64), "Idempotency-Key", "deep-ok", "Content-Type", "application/json"); r.status != 201 {
					t.Errorf("nesting at the limit: %+v", r)
				}
				if n := f.app.calls.Load(); n != 1 {
					t.Errorf("the handler ran %d times, want once (the request at the limit)", n)
				}
			})
		})
	}
}

// TestLogsRedactKeysAndBodies: whatever the middleware logs, on every
// path (execution, replay, conflict, refusals, a handler failure, a
// store that is down), never holds the client's key or the request body.
// Proves threat:secrets-in-logs (docs/threat-model.md).
func TestLogsRedactKeysAndBodies(t *testing.T) {
	const key, secret = "key-SECRET-7f3e9c", "BODY-SECRET-41c2"
	for _, style := range styles {
		t.Run(style.name, func(t *testing.T) {
			stores(t, func(t *testing.T, store registry.Store) {
				var logs bytes.Buffer
				logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				f := newFixtureWith(t, store, idemhttp.Enforce, func(m *idemhttp.Middleware) {
					m.Logger = logger
					if style.shape != nil {
						style.shape(m)
					}
				})
				body := `{"card":"` + secret + `"}`
				steps := []struct {
					key, body string
					hdr       []string
					status    int
				}{
					{key, body, nil, 201},
					{key, body, nil, 201},                                                // replay
					{key, `{"card":"other-` + secret + `"}`, nil, 422},                   // conflict
					{key + "-fail", body, []string{"X-Test", "fail"}, 500},               // released
					{key + "-panic", body, []string{"X-Test", "panic"}, 500},             // released
					{key + "-big", body, []string{"X-Test", "big"}, 500},                 // RESPONSE_TOO_LARGE
					{key + " " + secret, body, nil, 400},                                 // KEY_INVALID
					{key + "-json", `{"` + secret + `":1,"` + secret + `":2}`, nil, 400}, // INVALID_JSON
				}
				for _, s := range steps {
					if r := f.post(s.key, s.body, s.hdr...); r.status != s.status {
						t.Errorf("%s: %d, want %d", s.key, r.status, s.status)
					}
				}
				store.Close()
				if r := f.post(key+"-down", body); r.status != 503 {
					t.Errorf("store down: %d", r.status)
				}
				out := logs.String()
				if !strings.Contains(out, "operation executed") || !strings.Contains(out, "registry") {
					t.Fatalf("the logs miss the execution or the store failure, so they prove nothing:\n%s", out)
				}
				for _, s := range []string{key, secret} {
					if strings.Contains(out, s) {
						t.Errorf("the logs hold %q:\n%s", s, out)
					}
				}
			})
		})
	}
}
