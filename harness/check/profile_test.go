package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
)

// strictScenarios are the scenarios the strict profile scores.
var strictScenarios = profileScenarios[ProfileStrict]

// holdForDuplicate makes the first request of each key wait (at most
// holdMax) until a second request with that key has arrived, so that
// duplicates of a request in flight really meet it in flight: a test
// server's stand-in for a slow handler, released by the event itself.
type holdForDuplicate struct {
	mu      sync.Mutex
	arrived map[string]chan struct{} // closed when a second request of the key arrived
}

const holdMax = time.Second

// arrive registers a request with key and returns a function that waits
// for a duplicate if this was the key's first request.
func (h *holdForDuplicate) arrive(key string) (wait func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.arrived == nil {
		h.arrived = map[string]chan struct{}{}
	}
	ch, seen := h.arrived[key]
	if seen {
		select {
		case <-ch:
		default:
			close(ch)
		}
		return func() {}
	}
	ch = make(chan struct{})
	h.arrived[key] = ch
	return func() {
		t := time.NewTimer(holdMax)
		defer t.Stop()
		select {
		case <-ch:
		case <-t.C:
		}
	}
}

// serveIdem is an API made idempotent with idem's library (idemhttp, the
// two-phase style, canonical JSON that keeps numbers as written, SQLite):
// a POST creates a thing; X-Fail: 1 makes its handler answer 503.
func serveIdem(t *testing.T) string {
	t.Helper()
	st, err := idemstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "things.db"), idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	identity := func(r *http.Request) (idem.Identity, error) {
		user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || user == "" {
			return idem.Identity{}, errors.New("no bearer token")
		}
		return idem.Identity{Tenant: "t", Principal: user}, nil
	}
	mw, err := idemhttp.New(t.Context(), st, idemhttp.Operation{
		Name: "things.create", APIRevision: "v1",
		Binding: idem.Binding{Canon: canon.Options{Mode: canon.ModeJSON}},
	}, identity, idemhttp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var hold holdForDuplicate
	var n atomic.Int64
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") == "1" {
			http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
			return
		}
		id := fmt.Sprintf("thing_%d", n.Add(1))
		w.Header().Set("Location", "/things/"+id)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get(DefaultKeyHeader); k != "" {
			hold.arrive(k)()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveWeak is an API that behaves like the common weaker designs, written
// here from scratch: keys are not scoped to the caller, a request without
// a key is executed, payloads are compared after a JCS-like
// canonicalisation (numbers parsed, so 10.0 is 10), every answer is
// stored and replayed (a 5xx too), a key in flight or reused with another
// payload gets a bodyless 409, and a key is forgotten after expiry.
func serveWeak(t *testing.T, expiry time.Duration) string {
	t.Helper()
	type entry struct {
		done    chan struct{}
		payload string
		status  int
		body    []byte
		at      time.Time
	}
	var (
		mu      sync.Mutex
		entries = map[string]*entry{}
		n       atomic.Int64
		hold    holdForDuplicate
	)
	create := func(r *http.Request) (int, []byte) {
		if r.Header.Get("X-Fail") == "1" {
			return http.StatusServiceUnavailable, []byte("failing on purpose")
		}
		return http.StatusCreated, fmt.Appendf(nil, `{"id":"thing_%d"}`, n.Add(1))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var v any
		json.Unmarshal(raw, &v)
		canonical, _ := json.Marshal(v) // JCS-like: numbers become float64
		key := r.Header.Get(DefaultKeyHeader)
		if key == "" {
			status, body := create(r)
			w.WriteHeader(status)
			w.Write(body)
			return
		}
		wait := hold.arrive(key)
		mu.Lock()
		e, ok := entries[key]
		if ok && e.status != 0 && time.Since(e.at) > expiry {
			delete(entries, key)
			ok = false
		}
		switch {
		case !ok:
			e = &entry{done: make(chan struct{}), payload: string(canonical)}
			entries[key] = e
			mu.Unlock()
			wait()
			status, body := create(r)
			mu.Lock()
			e.status, e.body, e.at = status, body, time.Now()
			mu.Unlock()
			w.WriteHeader(status)
			w.Write(body)
		case e.status == 0 || e.payload != string(canonical):
			mu.Unlock()
			w.WriteHeader(http.StatusConflict)
		default:
			status, body := e.status, e.body
			mu.Unlock()
			w.WriteHeader(status)
			w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runStrict runs the strict profile's scenarios against url.
func runStrict(t *testing.T, url string, expiry time.Duration, fault bool) *Report {
	t.Helper()
	cfg := Config{
		URL:       url,
		Body:      `{"name":"thing {{unique}}","size":{{variant}},"weight":{{lexical}}}`,
		Header:    http.Header{"Authorization": {"Bearer alice"}},
		AltHeader: http.Header{"Authorization": {"Bearer bob"}},
		IDField:   "id",
		Profile:   ProfileStrict,
		Only:      strictScenarios,
		Expiry:    expiry,
		Timeout:   time.Minute,
	}
	if fault {
		cfg.FaultHeader = http.Header{"X-Fail": {"1"}}
	}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	rep.WriteTable(&table)
	t.Logf("report:\n%s", table.String())
	return rep
}

// TestProfileStrictSeparates: every scenario of the strict profile (the
// IETF ones with it) passes on an API built with idem's library and fails
// on a server that behaves like the common weaker designs — replays 5xx,
// answers a bodyless 409 for both a conflict and a request in flight,
// conflates 10.0 with 10, executes a request without a key, shares keys
// across callers and forgets them after expiry. Both scorecards say so,
// in text, JSON and HTML.
func TestProfileStrictSeparates(t *testing.T) {
	t.Parallel()
	const expiry = time.Second
	good := runStrict(t, serveIdem(t), expiry, true)
	weak := runStrict(t, serveWeak(t, expiry), expiry, true)
	for _, name := range strictScenarios {
		if r, ok := good.Result(name); !ok || r.Status != Passed {
			t.Errorf("%s on idem: %+v, want passed", name, r)
		}
		if r, ok := weak.Result(name); !ok || r.Status != Failed {
			t.Errorf("%s on the weaker server: %+v, want failed", name, r)
		}
	}
	if len(good.Scorecards) != 2 || !good.Scorecards[1].Passed || good.Scorecards[1].Score != len(strictScenarios) ||
		good.Scorecards[0].Profile != ProfileIETF || !good.Scorecards[0].Passed {
		t.Errorf("idem's scorecards: %+v", good.Scorecards)
	}
	if len(weak.Scorecards) != 2 || weak.Scorecards[0].Passed || weak.Scorecards[1].Passed || weak.Scorecards[1].Score != 0 {
		t.Errorf("the weaker server's scorecards: %+v", weak.Scorecards)
	}
	var text, html, js bytes.Buffer
	weak.WriteTable(&text)
	weak.WriteHTML(&html)
	json.NewEncoder(&js).Encode(weak)
	if !strings.Contains(text.String(), "profile strict: FAILED, 0 of 8 scenarios passed") {
		t.Errorf("the text report has no strict scorecard:\n%s", text.String())
	}
	if !strings.Contains(html.String(), `data-profile="strict"`) || !strings.Contains(js.String(), `"scorecards":[{"profile":"ietf"`) {
		t.Errorf("the HTML or JSON report has no scorecard")
	}
}

// TestProfileStrictReferenceService: the reference payments service
// passes the strict profile. What it cannot be asked is skipped, not
// passed: its schema takes no number whose scale is significant (amounts
// are decimal strings at scale 2), and it has no way to fail on purpose.
func TestProfileStrictReferenceService(t *testing.T) {
	t.Parallel()
	base := servePayments(t, "sqlite:"+filepath.Join(t.TempDir(), "strict.db"))
	rep, err := Run(context.Background(), Config{
		URL:       base + "/v1/payments",
		Body:      paymentsTemplate,
		Header:    bearer("tok-alice-Zr4kW9pQ2mX7vT1nB8y"),
		AltHeader: bearer("tok-bob-Hd3sF6gJ0aK9wE2rU7iO"),
		CountURL:  "/v1/payments",
		Profile:   ProfileStrict,
		Only:      strictScenarios,
		Expiry:    time.Second,
		Timeout:   2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	rep.WriteTable(&table)
	t.Logf("report:\n%s", table.String())
	if !rep.Passed || len(rep.Scorecards) != 2 || !rep.Scorecards[1].Passed {
		t.Fatalf("the reference service failed the strict profile: %+v", rep.Scorecards)
	}
	for _, name := range []string{"ietf-missing-key", "ietf-problem-details", "ietf-conflict-422", "scoping", "strict-expiry"} {
		if r, _ := rep.Result(name); r.Status != Passed {
			t.Errorf("%s: %+v, want passed", name, r)
		}
	}
	for _, name := range []string{"strict-lexical-number", "strict-5xx-replay"} {
		if r, _ := rep.Result(name); r.Status != Skipped {
			t.Errorf("%s: %+v, want skipped", name, r)
		}
	}
}
