package idem_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestCanonicalTarget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url  string
		keep []string
		want string
	}{
		{"/v1/payments", nil, "/v1/payments"},
		{"", nil, "/"},
		{"/", nil, "/"},
		{"https://api.example.com", nil, "/"},
		{"https://api.example.com/v1/x?y=1#frag", nil, "/v1/x"},
		{"/v1/payments/", nil, "/v1/payments/"},

		// Percent-encoding.
		{"/v1/payments/%7Eabc", nil, "/v1/payments/~abc"},
		{"/v1/payments/%7eabc", nil, "/v1/payments/~abc"},
		{"/%41%62c%2D%5F%2E%30", nil, "/Abc-_.0"},
		{"/v1/%c3%a9", nil, "/v1/%C3%A9"},
		{"/v1/é", nil, "/v1/%C3%A9"},
		{"/v1/a%2fb", nil, "/v1/a%2Fb"},
		{"/v1/a%2Fb", nil, "/v1/a%2Fb"},
		{"/v1/a%20b", nil, "/v1/a%20b"},
		{"/v1/a%3fb", nil, "/v1/a%3Fb"},
		{"/v1/a%25b", nil, "/v1/a%25b"},

		// Dot segments (RFC 3986 section 5.2.4).
		{"/v1/./payments", nil, "/v1/payments"},
		{"/v1/../v1/payments", nil, "/v1/payments"},
		{"/v1/x/y/../../payments", nil, "/v1/payments"},
		{"/v1/payments/.", nil, "/v1/payments/"},
		{"/v1/payments/..", nil, "/v1/"},
		{"/..", nil, "/"},
		{"/.", nil, "/"},
		{"/../../a", nil, "/a"},
		{"/v1/%2e/payments", nil, "/v1/payments"},
		{"/v1/x/%2E%2E/payments", nil, "/v1/payments"},
		{"/v1/.../payments", nil, "/v1/.../payments"},
		{"/v1/.x/payments", nil, "/v1/.x/payments"},
		{"a/b", nil, "/a/b"},
		{"a/../b", nil, "/b"},
		{"./a", nil, "/a"},

		// Query.
		{"/p?a=1", nil, "/p"},
		{"/p?a=1", []string{"a"}, "/p?a=1"},
		{"/p", []string{"a"}, "/p"},
		{"/p?a=", []string{"a"}, "/p?a="},
		{"/p?a", []string{"a"}, "/p?a="},
		{"/p?b=2&a=1&c=3", []string{"b", "a"}, "/p?a=1&b=2"},
		{"/p?a=2&x=0&a=1", []string{"a"}, "/p?a=2&a=1"},
		{"/p?a=x%20y", []string{"a"}, "/p?a=x+y"},
		{"/p?a=x+y", []string{"a"}, "/p?a=x+y"},
		{"/p?a=%26%3D", []string{"a"}, "/p?a=%26%3D"},
		{"/p?a=%7e", []string{"a"}, "/p?a=~"},
		{"/p?A=1", []string{"a"}, "/p"},
		{"/p?a=1", []string{"a", "a"}, "/p?a=1"},
		{"/p?a%20b=1", []string{"a b"}, "/p?a+b=1"},
		{"/v1/./p?a=1", []string{"a"}, "/v1/p?a=1"},
		{"?a=1", []string{"a"}, "/?a=1"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", tt.url, err)
		}
		got, err := idem.CanonicalTarget(u, tt.keep)
		if err != nil {
			t.Errorf("CanonicalTarget(%q, %q): %v", tt.url, tt.keep, err)
			continue
		}
		if got != tt.want {
			t.Errorf("CanonicalTarget(%q, %q) = %q, want %q", tt.url, tt.keep, got, tt.want)
		}
	}
}

// TestCanonicalTargetBuiltURL covers URLs built in code (as a router does
// when it fills in path parameters) rather than parsed.
func TestCanonicalTargetBuiltURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		u    *url.URL
		want string
	}{
		{&url.URL{Path: "/v1/payments/pay_1"}, "/v1/payments/pay_1"},
		{&url.URL{Path: "/v1/payments/a b"}, "/v1/payments/a%20b"},
		{&url.URL{Path: "/v1/payments/100%"}, "/v1/payments/100%25"},
		{&url.URL{Path: "/v1/a/b", RawPath: "/v1/a%2Fb"}, "/v1/a%2Fb"},
		{&url.URL{Path: "/v1/a/b", RawPath: "/v1/a%2fb"}, "/v1/a%2Fb"},
		// An inconsistent RawPath is ignored.
		{&url.URL{Path: "/v1/a/b", RawPath: "/v1/zz"}, "/v1/a/b"},
		{&url.URL{}, "/"},
		{&url.URL{Path: "//v1"}, "//v1"},
		{&url.URL{Path: "v1/x/../y"}, "/v1/y"},
	}
	for _, tt := range tests {
		got, err := idem.CanonicalTarget(tt.u, nil)
		if err != nil || got != tt.want {
			t.Errorf("CanonicalTarget(%#v) = %q, %v; want %q", tt.u, got, err, tt.want)
		}
	}
}

// TestCanonicalTargetIdempotent checks that a canonical target is its own
// canonical form.
func TestCanonicalTargetIdempotent(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"/v1/payments/%7Eabc/./x/../y?b=2&a=1&a=0",
		"/v1/%c3%a9/a%2fb/a b?a=x%20y&b=%26",
		"/v1/..",
		"/v1/a%3Bb;c,d/e=f@g:h",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		once, err := idem.CanonicalTarget(u, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		u2, err := url.Parse(once)
		if err != nil {
			t.Fatalf("canonical target %q does not parse: %v", once, err)
		}
		twice, err := idem.CanonicalTarget(u2, []string{"a", "b"})
		if err != nil || twice != once {
			t.Errorf("CanonicalTarget not idempotent: %q -> %q -> %q (%v)", raw, once, twice, err)
		}
		if strings.ContainsAny(once, " #") {
			t.Errorf("canonical target %q holds an unescaped space or #", once)
		}
	}
}
