package idemhttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// TestBindingQueryAndHeaders: a declared significant query parameter and a
// declared business header are part of the fingerprint; other query
// parameters and headers are not.
func TestBindingQueryAndHeaders(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		mw := &idemhttp.Middleware{
			Store: store,
			Operation: idemhttp.Operation{Name: "things.bind", APIRevision: "v1",
				Binding: idem.Binding{Query: []string{"dry_run"}, Headers: []string{"X-Api-Version"}}},
			Identity: func(r *http.Request) (idem.Identity, error) {
				if r.Header.Get("X-Principal") == "" {
					return idem.Identity{}, errors.New("anonymous")
				}
				return idem.Identity{Tenant: "t", Principal: r.Header.Get("X-Principal")}, nil
			},
		}
		app := &app{release: make(chan struct{}), started: make(chan struct{}, 1)}
		srv := httptest.NewServer(mw.Handler(app))
		t.Cleanup(srv.Close)
		post := func(key, query, version, ct string) (int, string) {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/things"+query, strings.NewReader(`{"a":1}`))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("X-Principal", "alice")
			req.Header.Set("Idempotency-Key", key)
			if version != "" {
				req.Header.Set("X-Api-Version", version)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") + "|" + code(result{body: string(b)})
		}
		cases := []struct {
			query, version, ct string
			status             int
			what               string
		}{
			{"?dry_run=0&trace=1", "2", "application/json", 201, "|"},
			{"?trace=2&dry_run=0", "2", "application/json", 201, "true|"},                // other parameter ignored
			{"?dry_run=0", "2", "application/json; charset=utf-8", 201, "true|"},         // same normalised media type
			{"?dry_run=1", "2", "application/json", 422, "|PAYLOAD_CONFLICT"},            // significant parameter
			{"?dry_run=0", "3", "application/json", 422, "|PAYLOAD_CONFLICT"},            // business header
			{"?dry_run=0", "", "application/json", 422, "|PAYLOAD_CONFLICT"},             // header absent
			{"?dry_run=0", "2", "application/vnd.things+json", 422, "|PAYLOAD_CONFLICT"}, // media type
		}
		for _, c := range cases {
			status, what := post("bind-1", c.query, c.version, c.ct)
			if status != c.status || what != c.what {
				t.Errorf("%s X-Api-Version=%q %s: %d %q, want %d %q", c.query, c.version, c.ct, status, what, c.status, c.what)
			}
		}
		if app.calls.Load() != 1 {
			t.Errorf("handler ran %d times, want 1", app.calls.Load())
		}
	})
}
