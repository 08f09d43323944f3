package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// bothStyles runs fn for the two-phase and the one-transaction style.
func bothStyles(t *testing.T, fn func(t *testing.T, style func(*idemhttp.Middleware))) {
	t.Run("two-phase", func(t *testing.T) { fn(t, func(*idemhttp.Middleware) {}) })
	t.Run("one-transaction", func(t *testing.T) { fn(t, oneTransaction) })
}

// businessRows counts mw_effects rows per operation ID for rows whose
// note is payload (a plain execution's operation ID is its own, held by
// no record).
func (f *fixture) businessRows(payload string) map[string]int {
	f.t.Helper()
	n := map[string]int{}
	err := f.store.InTx(f.t.Context(), func(ctx context.Context, tx registry.Tx) error {
		rows, err := tx.Query(ctx, `SELECT operation_id FROM mw_effects WHERE note = $1`, payload)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			n[id]++
		}
		return rows.Err()
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestShadowSafeToLeave, in both styles: a shadow request commits its
// record together with its business row; a handler that fails (5xx)
// leaves neither; after the switch to enforce, the retry replays the
// answer shadow committed and executes nothing.
// Proves threat:shadow-crash-reexecution (docs/threat-model.md).
func TestShadowSafeToLeave(t *testing.T) {
	bothStyles(t, func(t *testing.T, style func(*idemhttp.Middleware)) {
		stores(t, func(t *testing.T, store registry.Store) {
			f := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, 20*time.Millisecond, style))
			setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutShadow})
			first := f.post("k1", `{"n":"k1"}`)
			if first.status != 201 {
				t.Fatalf("shadow: %+v", first)
			}
			rec, err := store.Get(t.Context(), scopeOf(t, "k1"))
			if err != nil || rec.State != idem.StateSucceeded || rec.Response == nil || string(rec.Response.Body) != first.body {
				t.Fatalf("shadow record %+v, %v: want SUCCEEDED with the answer sent", rec, err)
			}
			if rows := f.businessRows(`{"n":"k1"}`); rows[rec.OperationID] != 1 || len(rows) != 1 {
				t.Errorf("business rows %v: want one, of operation %s", rows, rec.OperationID)
			}
			if r := f.post("k2", `{"n":"k2"}`, "X-Test", "fail"); r.status != 500 {
				t.Fatalf("failing handler: %+v", r)
			}
			if _, err := store.Get(t.Context(), scopeOf(t, "k2")); !errors.Is(err, registry.ErrNotFound) {
				t.Errorf("a failed shadow execution left a record: %v", err)
			}
			if rows := f.businessRows(`{"n":"k2"}`); len(rows) != 0 {
				t.Errorf("a failed shadow execution left business rows %v", rows)
			}
			setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutEnforce, Percent: 100})
			waitUntil(t, "enforce picked up", func() bool { return f.enforced("t") })
			calls := f.app.calls.Load()
			again := f.post("k1", `{"n":"k1"}`)
			if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry under enforce: %+v, want the replay of %+v", again, first)
			}
			if n := f.app.calls.Load(); n != calls {
				t.Errorf("the retry executed again")
			}
		})
	})
}

// TestShadowToEnforceUnderLoad, in both styles: keys first executed under
// shadow are retried by concurrent clients while the operation is
// switched to enforce. Every retry sent after the switch committed
// replays the first answer — also on the server whose cached row still
// says shadow — and no key has a second execution with a record; the
// only other executions are plain ones of retries sent before the switch.
// Proves threat:shadow-crash-reexecution and threat:shadow-answer-lost
// (docs/threat-model.md).
func TestShadowToEnforceUnderLoad(t *testing.T) {
	bothStyles(t, func(t *testing.T, style func(*idemhttp.Middleware)) {
		stores(t, func(t *testing.T, store registry.Store) {
			f := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, 50*time.Millisecond, style))
			// A second server that reads the row once, before the
			// switch, and would not read it again for an hour: its first
			// request after the switch is served from a row that says
			// shadow.
			stale := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, time.Hour, style))
			setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutShadow})
			staleFirst := stale.post("stale", `{"n":"stale"}`)
			if staleFirst.status != 201 {
				t.Fatalf("second server, shadow: %+v", staleFirst)
			}
			const keys = 12
			firsts := make([]result, keys)
			for i := range keys {
				k := fmt.Sprintf("load-%d", i)
				if firsts[i] = f.post(k, `{"n":"`+k+`"}`); firsts[i].status != 201 {
					t.Fatalf("first %s: %+v", k, firsts[i])
				}
			}
			var switched, stop atomic.Bool
			var sent atomic.Int32
			var mu sync.Mutex
			plainBefore := map[int]int{} // key → retries answered without a replay
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for n := g; !stop.Load(); n++ {
						i := n % keys
						k := fmt.Sprintf("load-%d", i)
						after := switched.Load()
						r := f.post(k, `{"n":"`+k+`"}`)
						sent.Add(1)
						replayed := r.status == 201 && r.body == firsts[i].body && r.header.Get("Idempotent-Replayed") == "true"
						switch {
						case after && !replayed:
							t.Errorf("retry of %s sent after the switch: %+v, want the replay", k, r)
						case !replayed && r.status == 201:
							mu.Lock()
							plainBefore[i]++
							mu.Unlock()
						case !replayed:
							t.Errorf("retry of %s: %+v", k, r)
						}
					}
				})
			}
			waitUntil(t, "retries under shadow", func() bool { return sent.Load() >= 20 })
			setRollout(t, store, registry.RolloutChange{Mode: registry.RolloutEnforce, Percent: 100})
			switched.Store(true)
			mark := sent.Load()
			waitUntil(t, "retries after the switch", func() bool { return sent.Load() >= mark+40 })
			waitUntil(t, "enforce picked up", func() bool { return f.enforced("t") })
			stop.Store(true)
			wg.Wait()
			if r := stale.post("stale", `{"n":"stale"}`); r.status != 201 || r.body != staleFirst.body || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry on the server whose row still says shadow: %+v, want the replay of %+v", r, staleFirst)
			}
			if n := stale.verdicts(registry.RolloutShadow, registry.VerdictReplay); n != 1 {
				t.Errorf("the second server counted %v shadow replays, want 1: it did not serve the retry from the row that says shadow", n)
			}
			if rows := f.businessRows(`{"n":"stale"}`); len(rows) != 1 || rows[staleFirst.header.Get("Idempotency-Operation")] != 1 {
				t.Errorf("business rows of the second server's key: %v, want its one execution", rows)
			}
			total := 0
			for _, n := range plainBefore {
				total += n
			}
			if total == 0 {
				t.Error("no retry before the switch executed plainly: the test proves nothing")
			}
			for i := range keys {
				k := fmt.Sprintf("load-%d", i)
				rows := f.businessRows(`{"n":"` + k + `"}`)
				op := firsts[i].header.Get("Idempotency-Operation")
				if rows[op] != 1 || len(rows)-1 != plainBefore[i] {
					t.Errorf("%s: business rows %v; want 1 of %s and %d plain ones (retries before the switch)", k, rows, op, plainBefore[i])
				}
			}
		})
	})
}

// verdicts returns idem_rollout_verdicts_total for mode and verdict.
func (f *fixture) verdicts(mode, verdict string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idem_rollout_verdicts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["mode"] == mode && labels["verdict"] == verdict {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestShadowNeverEnforced: while an operation was never enforced, shadow
// answers a retry by executing it plainly (no record, no replay) and
// counts replay, and another payload with the key executes and counts
// conflict; once the operation was enforced (EnforcedAt), shadow replays
// and answers conflicts as enforce.
// Proves threat:shadow-answer-lost (docs/threat-model.md).
func TestShadowNeverEnforced(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Shadow)
		first := f.post("s", `{"x":1}`)
		b := f.post("s", `{"x":1}`)
		c := f.post("s", `{"x":2}`)
		for _, r := range []result{first, b, c} {
			if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("never enforced, shadow executes like no middleware: %+v", r)
			}
		}
		if f.app.calls.Load() != 3 || f.effects() != 3 {
			t.Errorf("handler calls %d, effects %d; want 3 and 3", f.app.calls.Load(), f.effects())
		}
		// A plain execution's handler gets an operation ID of its own.
		if rows := f.businessRows(`{"x":1}`); len(rows) != 2 || rows[""] != 0 {
			t.Errorf("business rows of the two executions of {x:1} by operation ID: %v, want two IDs", rows)
		}
		for verdict, want := range map[string]float64{"execute": 1, "replay": 1, "conflict": 1} {
			if got := f.counted("idem_rollout_verdicts_total", "verdict", verdict); got != want {
				t.Errorf("%s = %v, want %v", verdict, got, want)
			}
		}
		if _, err := store.MarkEnforced(t.Context(), thingsOp); err != nil {
			t.Fatal(err)
		}
		if r := f.post("s", `{"x":1}`); r.status != 201 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("after EnforcedAt, shadow retry: %+v, want the replay of %+v", r, first)
		}
		if r := f.post("s", `{"x":2}`); r.status != 422 || code(r) != "PAYLOAD_CONFLICT" {
			t.Errorf("after EnforcedAt, shadow conflict: %+v", r)
		}
		if f.app.calls.Load() != 3 {
			t.Errorf("handler calls %d after EnforcedAt, want still 3", f.app.calls.Load())
		}
	})
}

// TestShadowCountsRetired: a retry of a retired key under shadow counts
// key_retired and (never enforced) executes.
func TestShadowCountsRetired(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := retentionFixture(t, store, idemhttp.Shadow, 0)
		f.post("s", `{}`)
		f.pruneAfter(20*time.Millisecond, registry.PruneResult{Retired: 1})
		if r := f.post("s", `{}`); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("shadow mode must execute like no middleware: %+v", r)
		}
		if got := f.counted("idem_rollout_verdicts_total", "verdict", "key_retired"); got != 1 {
			t.Errorf("key_retired = %v, want 1", got)
		}
	})
}

// TestVerdictsShadowPredictsEnforce: the verdicts shadow counts over a
// scripted traffic (new, replay, conflict, missing key, bad key, no
// identity) equal those enforce counts over the same script with fresh
// keys, per tenant in the registry after Flush.
func TestVerdictsShadowPredictsEnforce(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		sh := newFixtureWith(t, store, idemhttp.Shadow, withRollouts(store, time.Hour))
		en := newFixtureWith(t, store, idemhttp.Enforce, withRollouts(store, time.Hour))
		script := func(f *fixture, prefix string) {
			for i := range 3 {
				k := fmt.Sprintf("%s-%d", prefix, i)
				f.post(k, `{"a":1}`, "X-Tenant", "acme")
				f.post(k, `{"a":1}`, "X-Tenant", "acme")
				if i == 0 {
					f.post(k, `{"a":2}`, "X-Tenant", "acme")
				}
			}
			f.post("", `{}`, "X-Tenant", "acme")
			f.post("a;b", `{}`, "X-Tenant", "acme")
			f.post(prefix+"-x", `{}`, "X-Tenant", "acme", "X-Principal", "")
		}
		script(sh, "shadow")
		script(en, "enforce")
		for _, f := range []*fixture{sh, en} {
			if err := f.rollouts.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		counts, err := store.Verdicts(t.Context(), thingsOp)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]int64{}
		for _, c := range counts {
			if c.Tenant != "acme" && !(c.Tenant == "" && c.Verdict == registry.VerdictRefused) {
				t.Errorf("count for tenant %q: %+v", c.Tenant, c)
			}
			if got[c.Mode] == nil {
				got[c.Mode] = map[string]int64{}
			}
			got[c.Mode][c.Verdict] += c.Count
		}
		want := map[string]int64{registry.VerdictExecute: 3, registry.VerdictReplay: 3, registry.VerdictConflict: 1,
			registry.VerdictKeyRefused: 2, registry.VerdictRefused: 1}
		for _, mode := range []string{registry.RolloutShadow, registry.RolloutEnforce} {
			if fmt.Sprint(got[mode]) != fmt.Sprint(want) {
				t.Errorf("%s verdicts %v, want %v", mode, got[mode], want)
			}
		}
		if fmt.Sprint(got[registry.RolloutShadow]) != fmt.Sprint(got[registry.RolloutEnforce]) {
			t.Errorf("shadow predicted %v, enforce answered %v", got[registry.RolloutShadow], got[registry.RolloutEnforce])
		}
		if n := sh.counted("idem_rollout_verdicts_total", "verdict", "key_refused"); n != 2 {
			t.Errorf("idem_rollout_verdicts_total{verdict=key_refused} = %v in shadow, want 2", n)
		}
	})
}
