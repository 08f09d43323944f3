package payments

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
)

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "auth.json")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"t1": {"tenant": "acme", "principal": "alice"}, "t2": {"principal": "bob", "tenant": "acme"}}`)
	got, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["t1"] != (idem.Identity{Tenant: "acme", Principal: "alice"}) ||
		got["t2"] != (idem.Identity{Tenant: "acme", Principal: "bob"}) {
		t.Errorf("LoadTokens = %+v", got)
	}
	for _, bad := range []string{
		``,
		`{}`,
		`[]`,
		`{"t1": {"tenant": "acme"}}`,
		`{"t1": {"tenant": "", "principal": "p"}}`,
		`{"t1": {"tenant": "acme", "principal": "alice", "admin": true}}`,
		`{"t1": {"tenant": "a", "principal": "p"}, "t1": {"tenant": "b", "principal": "p"}}`,
		`{"": {"tenant": "a", "principal": "p"}}`,
		`{"a b": {"tenant": "a", "principal": "p"}}`,
		`{"t1": null}`,
		`{"t1": {"tenant": "a", "principal": "p"}} {}`,
	} {
		write(bad)
		if got, err := LoadTokens(path); err == nil {
			t.Errorf("LoadTokens accepted %s: %+v", bad, got)
		}
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("LoadTokens accepted a missing file")
	}
}

func TestIdentity(t *testing.T) {
	t.Parallel()
	tokens := DemoTokens()
	if tokens[DemoToken] != (idem.Identity{Tenant: "demo", Principal: "demo"}) || len(tokens) != 1 {
		t.Fatalf("DemoTokens = %+v", tokens)
	}
	for _, c := range []struct {
		headers []string
		ok      bool
	}{
		{[]string{"Bearer demo"}, true},
		{[]string{"bearer demo"}, true},
		{[]string{"Bearer  demo "}, true},
		{nil, false},
		{[]string{""}, false},
		{[]string{"Bearer"}, false},
		{[]string{"Bearer "}, false},
		{[]string{"Basic demo"}, false},
		{[]string{"Bearer demox"}, false},
		{[]string{"Bearer demo", "Bearer demo"}, false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for _, h := range c.headers {
			r.Header.Add("Authorization", h)
		}
		id, err := tokens.Identity(r)
		if (err == nil) != c.ok || c.ok && id.Principal != "demo" {
			t.Errorf("Identity(%q) = %+v, %v; want ok=%v", c.headers, id, err, c.ok)
		}
	}
}
