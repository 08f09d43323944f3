package idemhttp_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// TestMarkEnforcedRefusedByOffRow, in both styles: a server configured
// to enforce, whose cached row set no mode, meets a row an operator has
// since set off (without force, the operation never enforced):
// MarkEnforced leaves that row as it is, EnforcedAt unset. The request
// must then not be accepted under enforce — a record written without a
// committed EnforcedAt is one a later shadow would execute again — but
// served as the fresh row says (off: a plain execution, no record), and
// the next request too.
// Proves threat:rollout-off-unforced (docs/threat-model.md).
func TestMarkEnforcedRefusedByOffRow(t *testing.T) {
	bothStyles(t, func(t *testing.T, style func(*idemhttp.Middleware)) {
		stores(t, func(t *testing.T, store registry.Store) {
			f := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, time.Hour, style))
			// Caches the row (none: the configured enforce) without
			// accepting anything.
			if r := f.post("", `{}`); r.status != 400 || code(r) != "KEY_MISSING" {
				t.Fatalf("no key under enforce: %+v", r)
			}
			setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutOff})
			for i, key := range []string{"k", "k2"} {
				r := f.post(key, `{}`)
				if r.status != 201 || r.header.Get("Idempotency-Contract") != "" {
					t.Errorf("request %d under the fresh off row: %+v, want a plain 201", i, r)
				}
				if rec, err := store.Get(t.Context(), scopeOf(t, key)); !errors.Is(err, registry.ErrNotFound) {
					t.Errorf("a record was written with EnforcedAt unset: %+v, %v", rec, err)
				}
			}
			row, err := store.Rollout(t.Context(), thingsOp)
			if err != nil || row.Mode != registry.RolloutOff || !row.EnforcedAt.IsZero() {
				t.Errorf("row %+v, %v: want off, never enforced", row, err)
			}
		})
	})
}

// verdictTotals flushes f's counts and returns the registry's totals of
// things.create as tenant/mode/verdict → count.
func (f *fixture) verdictTotals() map[string]int64 {
	f.t.Helper()
	if err := f.rollouts.Flush(f.t.Context()); err != nil {
		f.t.Fatalf("Flush: %v", err)
	}
	counts, err := f.store.Verdicts(f.t.Context(), thingsOp)
	if err != nil {
		f.t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range counts {
		got[c.Tenant+"/"+c.Mode+"/"+c.Verdict] += c.Count
	}
	return got
}

// TestVerdictTenants: the tenant a verdict is counted under is the
// authenticated caller's — an Identity that fails counts under "", not
// under the tenant it returned alongside its error (which a client may
// choose) — and a tenant the registry cannot store (invalid UTF-8, a NUL,
// too long) is counted under a storable form of it instead of making
// every later Flush fail; distinct pending keys are bounded, the rest
// dropped.
// Proves threat:verdict-count-flood and threat:plain-caller-forged
// (docs/threat-model.md).
func TestVerdictTenants(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, time.Hour, func(mw *idemhttp.Middleware) {
			mw.Identity = func(r *http.Request) (idem.Identity, error) {
				id := idem.Identity{Tenant: r.Header.Get("X-Tenant"), Principal: r.Header.Get("X-Principal")}
				if r.Header.Get("X-Auth") != "ok" {
					return id, errors.New("bad credentials")
				}
				return id, nil
			}
		}))
		// Unauthenticated, claiming tenants of its choice.
		for i := range 3 {
			if r := f.post("", `{}`, "X-Tenant", fmt.Sprintf("forged-%d", i)); r.status != 401 {
				t.Fatalf("unauthenticated: %+v", r)
			}
		}
		// Authenticated tenants the registry cannot store as they are.
		long := strings.Repeat("x", registry.MaxAuditDetail+10)
		for _, tn := range []string{"bad\xffutf8", long} {
			if r := f.post("k-"+tn[:3], `{}`, "X-Tenant", tn, "X-Auth", "ok"); r.status != 201 {
				t.Fatalf("tenant %.20q: %+v", tn, r)
			}
		}
		if r := f.post("k", `{}`, "X-Tenant", "good", "X-Auth", "ok"); r.status != 201 {
			t.Fatalf("good tenant: %+v", r)
		}
		got := f.verdictTotals()
		want := map[string]int64{
			"/enforce/refused":                                  3,
			"bad?utf8/enforce/execute":                          1,
			long[:registry.MaxAuditDetail] + "/enforce/execute": 1,
			"good/enforce/execute":                              1,
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("verdicts %v\nwant %v", shortKeys(got), shortKeys(want))
		}
		// A hostile number of tenants between two flushes: at most the
		// bound is kept.
		idemhttp.SetMaxPendingVerdictsForTest(f.rollouts, 5)
		for i := range 8 {
			f.post("", `{}`, "X-Tenant", fmt.Sprintf("many-%d", i), "X-Auth", "ok")
		}
		n := 0
		for k := range f.verdictTotals() {
			if strings.HasPrefix(k, "many-") {
				n++
			}
		}
		if n != 5 {
			t.Errorf("%d tenants counted past a bound of 5 pending keys", n)
		}
	})
}

// shortKeys is m with its keys cut to 60 bytes, for a readable failure.
func shortKeys(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, n := range m {
		if len(k) > 60 {
			k = fmt.Sprintf("%s…(%d bytes)", k[:60], len(k))
		}
		out[k] += n
	}
	return out
}

// TestVerdictOfCappedDuplicate, in both styles: a duplicate refused 409
// IN_PROGRESS because its key is executing in this handler past the wait
// cap is counted in_flight — the one-transaction style refused it before
// the registry had a record, and counted nothing.
func TestVerdictOfCappedDuplicate(t *testing.T) {
	bothStyles(t, func(t *testing.T, style func(*idemhttp.Middleware)) {
		stores(t, func(t *testing.T, store registry.Store) {
			f := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) {
				style(mw)
				mw.WaitCap = -1
			})
			var wg sync.WaitGroup
			wg.Go(func() { f.post("capped", `{}`, "X-Test", "block") })
			<-f.app.started
			busy := f.post("capped", `{}`)
			f.app.release <- struct{}{}
			wg.Wait()
			if busy.status != 409 || code(busy) != "IN_PROGRESS" {
				t.Fatalf("duplicate past the wait cap: %+v", busy)
			}
			if got := f.verdicts("enforce", "in_flight"); got != 1 {
				t.Errorf("in_flight counted %v times, want 1", got)
			}
			if got := f.verdicts("enforce", "execute"); got != 1 {
				t.Errorf("execute counted %v times, want 1", got)
			}
		})
	})
}

// TestPlainCallerNotForged: in shadow and off, a request whose Identity
// failed still executes plainly, but its handler is told no caller
// (Caller false) — not the identity Identity returned alongside its
// error, which the client may have chosen (a token's claims whose
// signature failed): a handler trusting Caller would act as that caller.
// An authenticated request's handler gets its caller.
// Proves threat:plain-caller-forged (docs/threat-model.md).
func TestPlainCallerNotForged(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		for _, mode := range []idemhttp.Mode{idemhttp.Shadow, idemhttp.Off} {
			callers := make(chan string, 2)
			mw := &idemhttp.Middleware{
				Store:     store,
				Operation: idemhttp.Operation{Name: "forge." + string(mode), APIRevision: "v1", Mode: mode},
				Identity: func(r *http.Request) (idem.Identity, error) {
					id := idem.Identity{Tenant: r.Header.Get("X-Tenant"), Principal: "p"}
					if r.Header.Get("X-Auth") != "ok" {
						return id, errors.New("bad signature")
					}
					return id, nil
				},
			}
			srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id, ok := idemhttp.Caller(r.Context())
				callers <- fmt.Sprintf("%v %s", ok, id.Tenant)
				w.WriteHeader(http.StatusCreated)
			})))
			for _, auth := range []string{"forged", "ok"} {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(`{}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Tenant", "victim")
				req.Header.Set("X-Auth", auth)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				want := "false "
				if auth == "ok" {
					want = "true victim"
				}
				if got := <-callers; resp.StatusCode != 201 || got != want {
					t.Errorf("%s, %s request: %d, handler's Caller %q; want 201 and %q", mode, auth, resp.StatusCode, got, want)
				}
			}
			srv.Close()
		}
	})
}

// TestEnforceWithoutRolloutsThenShadow, in both styles: servers built
// without Middleware.Rollouts — a release that enforces the operation,
// rolled back to one that serves it in shadow — lose no stored answer:
// the enforcing server committed EnforcedAt before its first record, so
// the shadow server replays the retry and answers a reused key 422
// instead of executing them plainly.
// Proves threat:shadow-answer-lost (docs/threat-model.md).
func TestEnforceWithoutRolloutsThenShadow(t *testing.T) {
	bothStyles(t, func(t *testing.T, style func(*idemhttp.Middleware)) {
		stores(t, func(t *testing.T, store registry.Store) {
			enf := newFixtureWith(t, store, idemhttp.Enforce, style)
			first := enf.post("k", `{"a":1}`)
			if first.status != 201 {
				t.Fatalf("enforced: %+v", first)
			}
			sh := newFixtureWith(t, store, idemhttp.Shadow, style)
			if r := sh.post("k", `{"a":1}`); r.status != 201 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("shadow retry after enforce: %+v, want the replay of %+v", r, first)
			}
			if r := sh.post("k", `{"a":2}`); r.status != 422 || code(r) != "PAYLOAD_CONFLICT" {
				t.Errorf("shadow, reused key after enforce: %+v, want 422", r)
			}
			if n := sh.app.calls.Load(); n != 0 {
				t.Errorf("the shadow server executed %d times", n)
			}
		})
	})
}
