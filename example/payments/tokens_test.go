package payments

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
)

// TestLoadTokens: a good tokens file loads; malformed ones, and tokens
// that cannot hold 128 random bits, are refused.
// threat:console-token-weak
func TestLoadTokens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "auth.json")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "acme", "principal": "alice"}, "tok-bob-Hd3sF6gJ0aK9wE2rU7iO": {"principal": "bob", "tenant": "acme"}}`)
	got, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["tok-alice-Zr4kW9pQ2mX7vT1nB8y"] != (idem.Identity{Tenant: "acme", Principal: "alice"}) ||
		got["tok-bob-Hd3sF6gJ0aK9wE2rU7iO"] != (idem.Identity{Tenant: "acme", Principal: "bob"}) {
		t.Errorf("LoadTokens = %+v", got)
	}
	for _, bad := range []string{
		``,
		`{}`,
		`[]`,
		`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "acme"}}`,
		`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "", "principal": "p"}}`,
		`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "acme", "principal": "alice", "admin": true}}`,
		`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "a", "principal": "p"}, "tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "b", "principal": "p"}}`,
		`{"": {"tenant": "a", "principal": "p"}}`,
		`{"a b": {"tenant": "a", "principal": "p"}}`,
		`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": null}`,
		`{"t1": {"tenant": "a", "principal": "p"}}`,
		`{"0123456789abcdef0123456789abcdef": {"tenant": "a", "principal": "p"}}`,
		`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "a", "principal": "p"}} {}`,
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
