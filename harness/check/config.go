package check

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Defaults of Config.
const (
	DefaultMethod      = http.MethodPost
	DefaultKeyHeader   = "Idempotency-Key"
	DefaultConcurrency = 50
	DefaultTimeout     = 30 * time.Second
)

// Values {{variant}} takes: VariantSame in every payload but the changed
// one of the conflict scenario, which gets VariantChanged. Both are
// digits, so the placeholder works inside a JSON string ("1{{variant}}.00")
// and as a number.
const (
	VariantSame    = "1"
	VariantChanged = "2"
)

// Config says what to check and how. URL is required; the zero value of
// every other field is usable and means its documented default.
type Config struct {
	// URL is the absolute http(s) URL of the write endpoint.
	URL string
	// Method of every request; "" means DefaultMethod (POST).
	Method string
	// Body is the request body template: JSON text in which every
	// "{{unique}}" is replaced by a fresh decimal number per key and every
	// "{{variant}}" by VariantSame or VariantChanged. "" sends no body
	// (the conflict scenario is then skipped). When the body is not empty
	// and Header has no Content-Type, requests carry
	// "Content-Type: application/json".
	Body string
	// Header is sent with every request: the first credential and any
	// other header the endpoint needs. It must not hold KeyHeader.
	Header http.Header
	// AltHeader is the second credential of the scoping scenario: its
	// fields replace the same-named fields of Header (the others are
	// kept) in that scenario's second request. It must authenticate a
	// different principal than Header. nil skips the scenario.
	AltHeader http.Header
	// KeyHeader is the idempotency key's header; "" means
	// DefaultKeyHeader. Keys are random version 4 UUIDs.
	KeyHeader string
	// Concurrency is the number of simultaneous identical requests of the
	// concurrent scenario and the number of requests in flight in the load
	// scenario; 0 means DefaultConcurrency. It must be at least 2.
	Concurrency int
	// IDField names the member of a 2xx JSON body that identifies the
	// created resource ("id"; dots walk into nested objects: "data.id");
	// "" means the Location header. When neither is present, the digest
	// of the body stands for the resource.
	IDField string
	// CountURL, when set, is read (GET, with Header) before and after the
	// scenarios that create resources; it must answer 2xx with a JSON
	// number, a JSON array (its length is the count) or an object whose
	// CountField member (by default its only member) is one of those. A
	// relative URL is resolved against URL.
	CountURL string
	// CountField is the member of CountURL's object answer that holds the
	// count; see CountURL.
	CountField string
	// LoadKeys is the number of keys of the load scenario, each sent twice
	// at once; 0 skips the scenario.
	LoadKeys int
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// Only, when not empty, names the scenarios to run; the others are
	// reported as skipped.
	Only []string
	// Profile, when set (ProfileIETF, ProfileStrict), adds its scenarios
	// after the base ones and a scorecard per profile to the report.
	Profile string
	// Expiry is how long the API documents that it keeps a key; the
	// strict-expiry scenario retries a key that much later (plus a
	// second). 0 skips it.
	Expiry time.Duration
	// FaultHeader holds headers that make the API answer a request with
	// a 5xx (an option some APIs expose for tests); the strict-5xx-replay
	// scenario sends its first request with them. nil skips it.
	FaultHeader http.Header
	// Client sends the requests; nil means a client of its own with
	// Timeout and enough idle connections for Concurrency.
	Client *http.Client
	// Progress receives one line per step while the check runs
	// ("idem check: [3/7] concurrent: pass — …"); nil discards them.
	// Writes come from one goroutine at a time.
	Progress io.Writer
}

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("check: URL %q is not an absolute http(s) URL", c.URL)
	}
	c.Method = cmp.Or(c.Method, DefaultMethod)
	if !isToken(c.Method) {
		return c, fmt.Errorf("check: method %q is not a valid HTTP method", c.Method)
	}
	c.KeyHeader = http.CanonicalHeaderKey(cmp.Or(c.KeyHeader, DefaultKeyHeader))
	if !isToken(c.KeyHeader) {
		return c, fmt.Errorf("check: key header %q is not a valid header name", c.KeyHeader)
	}
	if c.Header.Get(c.KeyHeader) != "" || c.AltHeader.Get(c.KeyHeader) != "" {
		return c, fmt.Errorf("check: the headers must not carry the key header %s: the checker sets it", c.KeyHeader)
	}
	if c.Header == nil {
		c.Header = http.Header{} // so that its clones are never nil
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Concurrency < 2 {
		return c, errors.New("check: concurrency must be at least 2")
	}
	if c.LoadKeys < 0 {
		return c, errors.New("check: the number of load keys must not be negative")
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Timeout < 0 {
		return c, errors.New("check: timeout must be positive")
	}
	if c.Body != "" && !json.Valid([]byte(render(c.Body, "1", VariantSame))) {
		return c, errors.New("check: the body template is not JSON text once {{unique}} and {{variant}} are replaced")
	}
	if c.CountURL != "" {
		ref, err := url.Parse(c.CountURL)
		if err != nil {
			return c, fmt.Errorf("check: count URL %q: %w", c.CountURL, err)
		}
		c.CountURL = u.ResolveReference(ref).String()
	}
	if !validProfile(c.Profile) {
		return c, fmt.Errorf("check: unknown profile %q (want one of %v)", c.Profile, Profiles())
	}
	if c.Expiry < 0 {
		return c, errors.New("check: the expiry must not be negative")
	}
	if c.FaultHeader.Get(c.KeyHeader) != "" {
		return c, fmt.Errorf("check: the fault header must not carry the key header %s", c.KeyHeader)
	}
	for _, name := range c.Only {
		if !slices.ContainsFunc(Scenarios(), func(s Scenario) bool { return s.Name == name }) {
			return c, fmt.Errorf("check: unknown scenario %q", name)
		}
	}
	if c.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = c.Concurrency
		c.Client = &http.Client{Timeout: c.Timeout, Transport: tr}
	}
	return c, nil
}

// selected reports whether the scenario named name is to run.
func (c Config) selected(name string) bool {
	return len(c.Only) == 0 || slices.Contains(c.Only, name)
}

// ParseHeader parses one "Name: value" header line, as given to
// --header, into h. The name must be a valid header field name.
func ParseHeader(h http.Header, line string) error {
	name, value, ok := strings.Cut(line, ":")
	name = strings.TrimSpace(name)
	if !ok || !isToken(name) {
		return fmt.Errorf("check: header %q is not \"Name: value\"", line)
	}
	if strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("check: header %q holds a line break", name)
	}
	h.Add(name, strings.TrimSpace(value))
	return nil
}

// isToken reports whether s is an RFC 9110 token, the syntax of methods
// and header names. (The standard library's check is internal.)
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
