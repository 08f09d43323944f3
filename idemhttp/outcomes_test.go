package idemhttp_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// styles are the integration styles a test runs under: the operation's
// shape for each.
var styles = []struct {
	name  string
	shape func(*idemhttp.Middleware)
}{{"two-phase", nil}, {"one-transaction", oneTransaction}}

func TestStatusPolicy(t *testing.T) {
	for _, style := range styles {
		t.Run(style.name, func(t *testing.T) { statusPolicy(t, style.shape) })
	}
}

func statusPolicy(t *testing.T, shape func(*idemhttp.Middleware)) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixtureWith(t, store, idemhttp.Enforce, shape)
		// Declared 4xx: stored as FAILED_FINAL and replayed, effect kept;
		// a declared 4xx that changed nothing is REJECTED, replayed too.
		final := f.post("final", `{}`, "X-Test", "final")
		again := f.post("final", `{}`)
		if final.status != 422 || again.status != 422 || again.body != final.body || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("declared 422: first %+v, again %+v", final, again)
		}
		refused := f.post("refuse", `{}`, "X-Test", "refuse")
		refusedAgain := f.post("refuse", `{}`)
		if refused.status != 422 || refusedAgain.body != refused.body || refusedAgain.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("declared 422 without a write: first %+v, again %+v", refused, refusedAgain)
		}
		// A refusal after a write through QueryRow, or after queueing an
		// outbox message, changed something: FAILED_FINAL, not REJECTED.
		for _, mode := range []string{"refuse-returning", "refuse-outbox"} {
			if r := f.post(mode, `{}`, "X-Test", mode); r.status != 422 {
				t.Errorf("%s: %+v", mode, r)
			}
		}
		for key, want := range map[string]idem.State{"final": idem.StateFailedFinal, "refuse": idem.StateRejected,
			"refuse-returning": idem.StateFailedFinal, "refuse-outbox": idem.StateFailedFinal} {
			if rec, err := store.Get(t.Context(), scopeOf(t, key)); err != nil || rec.State != want {
				t.Errorf("record of %s: %s, %v; want %s", key, rec.State, err, want)
			}
		}
		// 5xx, undeclared 4xx and panics roll back and release: the retry
		// runs afresh.
		for _, mode := range []string{"fail", "conflict", "panic"} {
			key := "release-" + mode
			r := f.post(key, `{}`, "X-Test", mode)
			if r.status < 400 || r.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("%s: %+v", mode, r)
			}
			if _, err := store.Get(t.Context(), scopeOf(t, key)); err == nil {
				t.Errorf("%s: a record was left behind", mode)
			}
			retry := f.post(key, `{}`)
			if retry.status != 201 || retry.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("%s: retry did not execute afresh: %+v", mode, retry)
			}
		}
		// Over the snapshot cap: nothing stored, nothing committed.
		big := f.post("big", `{}`, "X-Test", "big")
		if big.status != 500 || code(big) != "RESPONSE_TOO_LARGE" {
			t.Errorf("big: %+v", big)
		}
		if _, err := store.Get(t.Context(), scopeOf(t, "big")); err == nil {
			t.Errorf("an oversized response left a record behind")
		}
		// Effects: final 1, refuse-returning 1 (committed with its
		// refusal), one per successful retry (3); the released and
		// oversized executions rolled back.
		if n := f.effects(); n != 5 {
			t.Errorf("%d effects, want 5", n)
		}
	})
}

// scopeOf recomputes the scope the fixture's middleware uses for a key.
func scopeOf(t *testing.T, key string) idem.ScopeHash {
	k, err := idem.ParseKey([]string{key}, idem.KeyPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	return idem.ScopeOf(idem.Identity{Tenant: "t", Principal: "alice"}, "things.create", "v1", k)
}

func TestRefusals(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		cases := []struct {
			key, body string
			hdr       []string
			status    int
			code      string
		}{
			{"", `{}`, nil, 400, "KEY_MISSING"},
			{"k", `{"a":1,"A":2}`, nil, 400, "INVALID_JSON"},
			{"k", `{}`, []string{"Content-Type", "text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"},
			{"k", `{}`, []string{"X-Principal", ""}, 401, "UNAUTHENTICATED"},
		}
		for _, c := range cases {
			r := f.post(c.key, c.body, c.hdr...)
			if r.status != c.status || code(r) != c.code || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%+v: got %d %s %s", c, r.status, code(r), r.header.Get("Content-Type"))
			}
		}
		if f.app.calls.Load() != 0 {
			t.Errorf("refused requests reached the handler %d times", f.app.calls.Load())
		}
	})
}

// TestInProgressAndWait: a duplicate of an operation in flight waits for
// it when the same handler is executing it, and replays its outcome; a
// duplicate that reaches another server (here: another middleware on the
// same store) gets 409 IN_PROGRESS with Retry-After and the monitor link,
// and with Prefer: wait it polls the registry and replays the outcome.
func TestInProgressAndWait(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		other := newFixture(t, store, idemhttp.Enforce) // another process on the same registry
		var wg sync.WaitGroup
		var first, local, waited result
		wg.Go(func() { first = f.post("slow", `{}`, "X-Test", "block") })
		<-f.app.started
		wg.Go(func() { local = f.post("slow", `{}`) })
		waitUntil(t, "the duplicate waiting for the execution of its key", func() bool {
			return f.counted("idem_joined_total", "operation", "things.create") == 1
		})
		busy := other.post("slow", `{}`)
		if busy.status != 409 || code(busy) != "IN_PROGRESS" || busy.header.Get("Retry-After") == "" ||
			busy.header.Get("Link") != "</v1/operations/"+busy.header.Get("Idempotency-Operation")+`>; rel="monitor"` {
			t.Errorf("in progress elsewhere: %+v", busy)
		}
		wg.Go(func() { waited = other.post("slow", `{}`, "Prefer", "wait=10") })
		// The waiter polls the registry; let the first request finish.
		f.app.release <- struct{}{}
		wg.Wait()
		if first.status != 201 {
			t.Fatalf("first: %+v", first)
		}
		for name, r := range map[string]result{"the local duplicate": local, "Prefer: wait elsewhere": waited} {
			if r.status != 201 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" ||
				r.header.Get("Idempotency-Operation") != first.header.Get("Idempotency-Operation") {
				t.Errorf("%s did not replay the outcome:\n first %+v\n got   %+v", name, first, r)
			}
		}
		if n := f.app.calls.Load() + other.app.calls.Load(); n != 1 {
			t.Errorf("handlers ran %d times, want 1", n)
		}
	})
}

func TestClientDisconnectAfterAcceptance(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan result)
		go func() { done <- f.postCtx(ctx, "gone", `{}`, "X-Test", "block") }()
		<-f.app.started
		cancel() // the client goes away while the handler runs
		if r := <-done; r.status != -1 {
			t.Fatalf("the cancelled client got %+v", r)
		}
		f.app.release <- struct{}{}
		// The outcome must be committed all the same: wait for it, then
		// replay it.
		again := f.post("gone", `{}`, "Prefer", "wait=10")
		if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("after disconnect: %+v", again)
		}
		if n := f.effects(); n != 1 {
			t.Errorf("%d effects, want 1", n)
		}
	})
}

// Proves threat:key-flooding (docs/threat-model.md).
func TestAdmitAndKeyLimit(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		done := f.post("before", `{}`)
		var drain error = &idem.Error{Code: idem.CodeDraining, Reason: "draining"}
		f.admit.Store(&drain)
		if r := f.post("new", `{}`); r.status != 503 || code(r) != "DRAINING" {
			t.Errorf("new operation while draining: %+v", r)
		}
		if r := f.post("before", `{}`); r.status != 201 || r.body != done.body {
			t.Errorf("replay while draining: %+v", r)
		}
		f.admit.Store(nil)
		if _, err := store.Get(t.Context(), scopeOf(t, "new")); err == nil {
			t.Error("a refused admission left a reservation")
		}
		// MaxActiveKeys 3: with three operations of alice's in flight (made
		// straight in the registry, so that no blocked handler holds
		// SQLite's single write lock), a fourth key is refused.
		for i := range 3 {
			c := registry.Claim{Scope: scopeOf(t, "active-"+string(rune('a'+i))), Fingerprint: idem.Fingerprint{9},
				Operation: "things.create", Owner: registry.OwnerOf(idem.Identity{Tenant: "t", Principal: "alice"})}
			if _, created, err := store.Reserve(t.Context(), c); err != nil || !created {
				t.Fatalf("reserve %d: %v %v", i, created, err)
			}
		}
		// Retry-After is the operation's lease (the default, 30 s).
		if r := f.post("active-d", `{}`); r.status != 429 || code(r) != "KEY_LIMIT" || r.header.Get("Retry-After") != "30" {
			t.Errorf("fourth active key: %+v; want 429 KEY_LIMIT with Retry-After: 30", r)
		}
		if r := f.post("active-d", `{}`, "X-Principal", "bob"); r.status != 201 {
			t.Errorf("another principal is not limited by alice's keys: %+v", r)
		}
		if r := f.post("before", `{}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replays are never limited: %+v", r)
		}
	})
}

// Proves threat:storage-trouble-fails-open (docs/threat-model.md).
func TestStoreDownFailsClosed(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		store.Close()
		r := f.post("k", `{}`)
		if r.status != http.StatusServiceUnavailable || code(r) != "STORE_UNAVAILABLE" || f.app.calls.Load() != 0 ||
			r.header.Get("Retry-After") == "" {
			t.Errorf("closed store: %+v, handler calls %d; want 503 STORE_UNAVAILABLE with Retry-After", r, f.app.calls.Load())
		}
	})
}

// TestUnreadableBody: a body that cannot be read (a broken chunked
// encoding) is the client's fault, 400 MALFORMED_REQUEST, not the
// registry's: nothing is reserved and the handler never runs.
// Proves threat:unreadable-body (docs/threat-model.md).
func TestUnreadableBody(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		r := exchange(t, f.srv.Listener.Addr().String(), "POST /things HTTP/1.1\r\nHost: a\r\nX-Principal: alice\r\n"+
			"Idempotency-Key: broken\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\n", 1)[0]
		if r.StatusCode != 400 || r.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(r.body, `"code":"MALFORMED_REQUEST"`) {
			t.Errorf("broken chunked body: %d %v %s", r.StatusCode, r.Header, r.body)
		}
		if _, err := store.Get(t.Context(), scopeOf(t, "broken")); err == nil {
			t.Error("an unreadable body left a record")
		}
		if f.app.calls.Load() != 0 {
			t.Errorf("the handler ran %d times", f.app.calls.Load())
		}
	})
}
