package check

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestConfigRefuses(t *testing.T) {
	t.Parallel()
	ok := Config{URL: "http://127.0.0.1:1/x"}
	for name, c := range map[string]Config{
		"no URL":            {},
		"relative URL":      {URL: "/x"},
		"other scheme":      {URL: "ftp://h/x"},
		"bad method":        {URL: ok.URL, Method: "PO ST"},
		"bad key header":    {URL: ok.URL, KeyHeader: "Key:"},
		"key in header":     {URL: ok.URL, Header: http.Header{"Idempotency-Key": {"k"}}},
		"key in alt header": {URL: ok.URL, KeyHeader: "X-Key", AltHeader: http.Header{"X-Key": {"k"}}},
		"concurrency 1":     {URL: ok.URL, Concurrency: 1},
		"negative load":     {URL: ok.URL, LoadKeys: -1},
		"negative timeout":  {URL: ok.URL, Timeout: -1},
		"not JSON":          {URL: ok.URL, Body: `{"a": {{unique}`},
		"unknown scenario":  {URL: ok.URL, Only: []string{"replay", "nope"}},
		"bad count URL":     {URL: ok.URL, CountURL: "http://[::1"},
	} {
		if rep, err := Run(t.Context(), c); err == nil || rep != nil {
			t.Errorf("%s: no error", name)
		}
	}
	c, err := ok.withDefaults()
	if err != nil || c.Method != "POST" || c.KeyHeader != "Idempotency-Key" || c.Concurrency != 50 ||
		c.Timeout != DefaultTimeout || c.Client == nil {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	c, err = Config{URL: "https://api.example/v1/pay?x=1", CountURL: "/v1/pay?limit=0", KeyHeader: "x-request-key"}.withDefaults()
	if err != nil || c.CountURL != "https://api.example/v1/pay?limit=0" || c.KeyHeader != "X-Request-Key" {
		t.Fatalf("%+v, %v", c, err)
	}
}

func TestParseHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	for _, line := range []string{"Authorization: Bearer a:b", "x-tenant:acme ", "X-Tenant: two"} {
		if err := ParseHeader(h, line); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
	}
	if h.Get("Authorization") != "Bearer a:b" || strings.Join(h.Values("X-Tenant"), ",") != "acme,two" {
		t.Fatalf("%v", h)
	}
	for _, line := range []string{"no colon", ": empty name", "Bad Name: v", "X: a\nb"} {
		if err := ParseHeader(http.Header{}, line); err == nil {
			t.Errorf("%q accepted", line)
		}
	}
}

func TestAltHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{"Authorization": {"Bearer a"}, "X-Version": {"2"}}
	got := altHeaders(h, http.Header{"Authorization": {"Bearer b"}})
	if got.Get("Authorization") != "Bearer b" || got.Get("X-Version") != "2" || h.Get("Authorization") != "Bearer a" {
		t.Fatalf("%v (from %v)", got, h)
	}
	if got := altHeaders(nil, http.Header{"A": {"1"}}); got.Get("A") != "1" {
		t.Fatalf("%v", got)
	}
}

func TestValues(t *testing.T) {
	t.Parallel()
	if got := render(`{"a":"x{{unique}}","n":{{unique}},"v":"1{{variant}}"}`, "7", "2"); got != `{"a":"x7","n":7,"v":"12"}` {
		t.Errorf("render: %s", got)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		k, u := newKey(), newUnique()
		if !uuid.MatchString(k) || len(u) != 15 || u[0] == '0' || strings.Trim(u, "0123456789") != "" || seen[k] || seen[u] {
			t.Fatalf("key %q, unique %q (or a repeat)", k, u)
		}
		seen[k], seen[u] = true, true
	}
}

func TestParseCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body, field string
		want        int
	}{
		{`7`, "", 7},
		{`[1,2,3]`, "", 3},
		{`{"payments": [{}, {}]}`, "", 2},
		{`{"total": 12, "items": []}`, "total", 12},
		{`{"data": {"n": 1}, "count": 4}`, "count", 4},
	} {
		if n, err := parseCount([]byte(c.body), c.field); err != nil || n != c.want {
			t.Errorf("%s (%q): %d, %v; want %d", c.body, c.field, n, err, c.want)
		}
	}
	for _, c := range []struct{ body, field string }{
		{`nope`, ""}, {`-1`, ""}, {`1.5`, ""}, {`"3"`, ""}, {`{"a": 1, "b": 2}`, ""}, {`{"a": 1}`, "b"}, {`{"a": {}}`, ""},
	} {
		if n, err := parseCount([]byte(c.body), c.field); err == nil {
			t.Errorf("%s (%q): %d, no error", c.body, c.field, n)
		}
	}
}

func TestResource(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"pay_1","data":{"n":12,"obj":{}}}`)
	withLoc := exchange{Status: 201, Header: http.Header{"Location": {"/p/1"}}, Body: body}
	noLoc := exchange{Status: 201, Header: http.Header{}, Body: body}
	for _, c := range []struct {
		field string
		e     exchange
		want  string
	}{
		{"", withLoc, "Location /p/1"},
		{"id", withLoc, "id=pay_1"},
		{"data.n", noLoc, "data.n=12"},
		{"", noLoc, "body sha256:"},
		{"data.obj", noLoc, "body sha256:"},
		{"missing", withLoc, "body sha256:"},
	} {
		r := &runner{cfg: Config{IDField: c.field}}
		if got := r.resource(c.e); !strings.HasPrefix(got, c.want) {
			t.Errorf("%q: %q, want %q", c.field, got, c.want)
		}
	}
}
