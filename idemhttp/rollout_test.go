package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

const thingsOp = "things.create"

// withRollouts gives the middleware a Rollouts over store refreshing every
// refresh, and takes the caller's tenant from X-Tenant ("t" without
// one).
func withRollouts(store registry.RolloutStore, refresh time.Duration, more ...func(*idemhttp.Middleware)) func(*idemhttp.Middleware) {
	return func(mw *idemhttp.Middleware) {
		mw.Rollouts = &idemhttp.Rollouts{Store: store, Refresh: refresh}
		mw.Identity = func(r *http.Request) (idem.Identity, error) {
			p := r.Header.Get("X-Principal")
			if p == "" {
				return idem.Identity{}, errors.New("no principal")
			}
			return idem.Identity{Tenant: cmpOr(r.Header.Get("X-Tenant"), "t"), Principal: p}, nil
		}
		for _, f := range more {
			f(mw)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// setRollout applies c to things.create on the version it reads first.
func setRollout(t *testing.T, store registry.RolloutStore, c registry.RolloutChange) registry.Rollout {
	t.Helper()
	now, err := store.Rollout(t.Context(), thingsOp)
	if err != nil {
		t.Fatal(err)
	}
	c.Operation, c.Seen, c.Actor = thingsOp, now.Version, "test"
	row, err := store.SetRollout(t.Context(), c)
	if err != nil {
		t.Fatalf("SetRollout %+v: %v", c, err)
	}
	return row
}

// enforced reports whether the fixture serves tenant under enforce: a
// request without a key is refused (400 KEY_MISSING) rather than
// executed (shadow).
func (f *fixture) enforced(tenant string) bool {
	f.t.Helper()
	r := f.post("", `{}`, "X-Tenant", tenant)
	switch {
	case r.status == 400 && code(r) == "KEY_MISSING":
		return true
	case r.status == 201:
		return false
	}
	f.t.Fatalf("tenant %s without a key: %+v", tenant, r)
	return false
}

// TestRolloutRamp: under enforce at 50 %, tenants split by their ramp
// bucket between enforce (no key → 400) and shadow (no key → executed),
// and a tenant never flips while the row holds; the allow and deny lists
// override the bucket; a new percentage reaches the middleware within its
// refresh.
// Proves threat:rollout-ramp-flip (docs/threat-model.md).
func TestRolloutRamp(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, 20*time.Millisecond))
		setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutEnforce, Percent: 50})
		var tenants, in, out []string
		for i := range 24 {
			tn := fmt.Sprintf("tenant-%02d", i)
			tenants = append(tenants, tn)
			if registry.RampBucket(thingsOp, tn, "") < 5000 {
				in = append(in, tn)
			} else {
				out = append(out, tn)
			}
		}
		if len(in) == 0 || len(out) == 0 {
			t.Fatalf("the tenants do not split at 50 %%: %v / %v", in, out)
		}
		for round := range 3 {
			for _, tn := range tenants {
				want := registry.RampBucket(thingsOp, tn, "") < 5000
				if got := f.enforced(tn); got != want {
					t.Fatalf("round %d: tenant %s enforced %v, want %v (bucket %d)", round, tn, got, want, registry.RampBucket(thingsOp, tn, ""))
				}
			}
		}
		// Allow a shadow tenant, deny an enforced one.
		setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutEnforce, Percent: 50, Allow: []string{out[0]}, Deny: []string{in[0]}})
		waitUntil(t, "the allowed tenant enforced", func() bool { return f.enforced(out[0]) })
		if f.enforced(in[0]) {
			t.Errorf("denied tenant %s is enforced", in[0])
		}
		if len(in) > 1 && !f.enforced(in[1]) {
			t.Errorf("tenant %s in the ramp is no longer enforced", in[1])
		}
		// 100 %: every tenant; 0 %: none.
		setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutEnforce, Percent: 100})
		waitUntil(t, "100 % picked up", func() bool { return f.enforced(out[len(out)-1]) })
		for _, tn := range tenants {
			if !f.enforced(tn) {
				t.Errorf("at 100 %% tenant %s is not enforced", tn)
			}
		}
		setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutEnforce, Percent: 0})
		waitUntil(t, "0 % picked up", func() bool { return !f.enforced(in[len(in)-1]) })
		for _, tn := range tenants {
			if f.enforced(tn) {
				t.Errorf("at 0 %% tenant %s is enforced", tn)
			}
		}
	})
}

// faultyStore is the real store with faults a test turns on: reading
// rollouts fails, MarkEnforced fails, AddVerdicts fails. It also counts the reservations
// made while the operation's row had no EnforcedAt.
type faultyStore struct {
	registry.Store
	failRead, failMark, failAdd atomic.Bool
	unmarked                    atomic.Int32
}

func (s *faultyStore) AddVerdicts(ctx context.Context, counts []registry.VerdictCount) error {
	if s.failAdd.Load() {
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, errInjected)
	}
	return s.Store.AddVerdicts(ctx, counts)
}

var errInjected = errors.New("injected: the registry is unreachable")

func (s *faultyStore) Rollout(ctx context.Context, op string) (registry.Rollout, error) {
	if s.failRead.Load() {
		return registry.Rollout{}, fmt.Errorf("%w: %w", registry.ErrUnavailable, errInjected)
	}
	return s.Store.Rollout(ctx, op)
}

func (s *faultyStore) MarkEnforced(ctx context.Context, op string) (registry.Rollout, error) {
	if s.failMark.Load() {
		return registry.Rollout{}, fmt.Errorf("%w: %w", registry.ErrUnavailable, errInjected)
	}
	return s.Store.MarkEnforced(ctx, op)
}

func (s *faultyStore) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	if row, err := s.Store.Rollout(ctx, c.Operation); err != nil || row.EnforcedAt.IsZero() {
		s.unmarked.Add(1)
	}
	return s.Store.Reserve(ctx, c)
}

// TestMarkEnforcedBeforeFirstRecord: a middleware enforcing an operation
// records that in the registry (EnforcedAt) before its first
// reservation; when it cannot, it refuses the request (503
// STORE_UNAVAILABLE) and executes nothing. With no row in hand, a failed
// read of the rollout fails the request closed too; with one, the row in
// hand serves.
// Proves threat:rollout-off-unforced (docs/threat-model.md).
func TestMarkEnforcedBeforeFirstRecord(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		fs := &faultyStore{Store: store}
		f := newFixtureWith(t, fs, idemhttp.Enforce, withRollouts(fs, time.Millisecond))
		fs.failRead.Store(true)
		if r := f.post("k0", `{}`); r.status != 503 || code(r) != "STORE_UNAVAILABLE" || f.app.calls.Load() != 0 {
			t.Fatalf("rollout unreadable, nothing in hand: %+v, %d calls; want 503 STORE_UNAVAILABLE", r, f.app.calls.Load())
		}
		fs.failRead.Store(false)
		fs.failMark.Store(true)
		if r := f.post("k1", `{}`); r.status != 503 || code(r) != "STORE_UNAVAILABLE" || f.app.calls.Load() != 0 {
			t.Fatalf("MarkEnforced failing: %+v, %d calls; want 503 STORE_UNAVAILABLE and nothing executed", r, f.app.calls.Load())
		}
		if _, err := store.Get(t.Context(), scopeOf(t, "k1")); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("a record was written without EnforcedAt: %v", err)
		}
		fs.failMark.Store(false)
		if r := f.post("k1", `{}`); r.status != 201 {
			t.Fatalf("after MarkEnforced works again: %+v", r)
		}
		row, err := store.Rollout(t.Context(), thingsOp)
		if err != nil || row.EnforcedAt.IsZero() {
			t.Fatalf("row %+v, %v: want EnforcedAt", row, err)
		}
		if n := fs.unmarked.Load(); n != 0 {
			t.Errorf("%d reservations before EnforcedAt was committed", n)
		}
		// A failed read with the row in hand: the row serves.
		fs.failRead.Store(true)
		if r := f.post("k2", `{}`); r.status != 201 {
			t.Errorf("rollout unreadable, row in hand: %+v, want 201", r)
		}
	})
}

// TestReadOnlyAfterEnforce: once an operation was enforced, a server
// configured to serve it off serves it read-only: a new key 503 READ_ONLY
// (problem+json, Retry-After) without executing, an old key replayed, a
// conflict 422, an operation in flight 409 with the monitor link (the
// monitor answering as always); forced off, requests pass through.
// Proves threat:rollout-off-unforced (docs/threat-model.md).
func TestReadOnlyAfterEnforce(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		enf := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, time.Millisecond))
		first := enf.post("old", `{"a":1}`)
		if first.status != 201 {
			t.Fatalf("enforced: %+v", first)
		}
		off := newFixtureWith(t, store, idemhttp.Off, withRollouts(store, 20*time.Millisecond))
		r := off.post("new", `{"a":1}`)
		if r.status != 503 || code(r) != "READ_ONLY" || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Retry-After") == "" {
			t.Errorf("new key read-only: %+v", r)
		}
		if r := off.post("old", `{"a":1}`); r.status != 201 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("old key read-only: %+v, want the replay of %+v", r, first)
		}
		if r := off.post("old", `{"a":2}`); r.status != 422 || code(r) != "PAYLOAD_CONFLICT" {
			t.Errorf("conflict read-only: %+v", r)
		}
		if r := off.post("", `{}`); r.status != 400 || code(r) != "KEY_MISSING" {
			t.Errorf("no key read-only: %+v", r)
		}
		// An operation in flight: 409 with the monitor link; the monitor
		// answers as always.
		done := make(chan result, 1)
		go func() { done <- enf.post("busy", `{}`, "X-Test", "block") }()
		<-enf.app.started
		busy := off.post("busy", `{}`)
		op := busy.header.Get("Idempotency-Operation")
		if busy.status != 409 || code(busy) != "IN_PROGRESS" || op == "" || busy.header.Get("Link") != "</v1/operations/"+op+`>; rel="monitor"` {
			t.Errorf("in flight read-only: %+v", busy)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, off.srv.URL+"/v1/operations/"+op, nil)
		req.Header.Set("X-Principal", "alice")
		if mon, err := http.DefaultClient.Do(req); err != nil || mon.StatusCode != 200 {
			t.Errorf("monitor on the read-only server: %v %v", mon, err)
		} else {
			mon.Body.Close()
		}
		enf.app.release <- struct{}{}
		if r := <-done; r.status != 201 {
			t.Errorf("the enforced execution: %+v", r)
		}
		if n := off.app.calls.Load(); n != 0 {
			t.Errorf("read-only executed %d times", n)
		}
		setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutOff, Force: true})
		waitUntil(t, "forced off picked up", func() bool { return off.post("new", `{"a":1}`).status == 201 })
		if r := off.post("new", `{"a":1}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("forced off: %+v, want a plain execution", r)
		}
	})
}

// TestAcceptsRecordsOf: a retry that crosses the deploy of revision v2
// replays the operation v1 recorded when v2 declares AcceptsRecordsOf
// "v1" (and conflicts on another payload); without the declaration it
// executes again.
// Proves threat:revision-crossing-retry (docs/threat-model.md).
func TestAcceptsRecordsOf(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		v1 := newFixture(t, store, idemhttp.Enforce)
		first := v1.post("k", `{"a":1}`)
		if first.status != 201 {
			t.Fatalf("v1: %+v", first)
		}
		compat := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) {
			mw.Operation.APIRevision, mw.Operation.AcceptsRecordsOf = "v2", "v1"
		})
		if r := compat.post("k", `{"a":1}`); r.status != 201 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("v2 accepting v1: %+v, want the replay of %+v", r, first)
		}
		if r := compat.post("k", `{"a":2}`); r.status != 422 || code(r) != "PAYLOAD_CONFLICT" {
			t.Errorf("v2 accepting v1, another payload: %+v", r)
		}
		if n := compat.app.calls.Load(); n != 0 {
			t.Errorf("v2 accepting v1 executed %d times", n)
		}
		plain := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) { mw.Operation.APIRevision = "v2" })
		if r := plain.post("k", `{"a":1}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || plain.app.calls.Load() != 1 {
			t.Errorf("v2 without the declaration: %+v, want a new execution", r)
		}
		for _, bad := range []string{"v2", " "} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("AcceptsRecordsOf %q accepted", bad)
					}
				}()
				mw := &idemhttp.Middleware{Store: store, Operation: idemhttp.Operation{Name: "x", APIRevision: "v2", AcceptsRecordsOf: bad}}
				mw.Identity = func(*http.Request) (idem.Identity, error) { return idem.Identity{}, nil }
				mw.Handler(http.NotFoundHandler())
			}()
		}
	})
}

// TestVerdictFlushKeepsCounts: counts a failed Flush could not write are
// kept and written by the next one, added to what was counted meanwhile.
func TestVerdictFlushKeepsCounts(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		fs := &faultyStore{Store: store}
		f := newFixtureWith(t, fs, idemhttp.Enforce, withRollouts(fs, time.Hour))
		fs.failAdd.Store(true)
		f.post("k", `{}`)
		if err := f.rollouts.Flush(t.Context()); err == nil {
			t.Fatal("Flush succeeded with AddVerdicts failing")
		}
		f.post("k", `{}`)
		fs.failAdd.Store(false)
		if err := f.rollouts.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		counts, err := store.Verdicts(t.Context(), thingsOp)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, c := range counts {
			got[c.Tenant+"/"+c.Mode+"/"+c.Verdict] += c.Count
		}
		want := map[string]int64{"t/enforce/execute": 1, "t/enforce/replay": 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("verdicts %v, want %v", got, want)
		}
		if err := f.rollouts.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if again, _ := store.Verdicts(t.Context(), thingsOp); fmt.Sprint(again) != fmt.Sprint(counts) {
			t.Errorf("a Flush with nothing pending changed the totals: %v, then %v", counts, again)
		}
	})
}
