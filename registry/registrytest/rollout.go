package registrytest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// Cases of the rollout rows and verdict counts (registry.RolloutStore).

const rolloutOp = "conformance.rollout"

// set applies c and fails the case on an error.
func (e *env) setRollout(c registry.RolloutChange) registry.Rollout {
	e.t.Helper()
	r, err := e.h.Store.SetRollout(e.ctx, c)
	if err != nil {
		e.t.Fatalf("SetRollout(%+v): %v", c, err)
	}
	return r
}

// rollout reads the operation's row and fails the case on an error.
func (e *env) rollout(op string) registry.Rollout {
	e.t.Helper()
	r, err := e.h.Store.Rollout(e.ctx, op)
	if err != nil {
		e.t.Fatalf("Rollout(%s): %v", op, err)
	}
	return r
}

// rolloutAudits returns the audit entries of rollout changes, oldest
// first.
func (e *env) rolloutAudits() []registry.AuditEntry {
	e.t.Helper()
	log, err := e.h.Store.AuditLog(e.ctx, registry.AuditFilter{Limit: 1000})
	if err != nil {
		e.t.Fatalf("AuditLog: %v", err)
	}
	var out []registry.AuditEntry
	for _, a := range slices.Backward(log) {
		if a.Action == registry.AuditRollout {
			out = append(out, a)
		}
	}
	return out
}

// sameRollout reports whether two rows hold the same state.
func sameRollout(a, b registry.Rollout) bool {
	return a.Operation == b.Operation && a.Mode == b.Mode && a.Percent == b.Percent &&
		a.ByPrincipal == b.ByPrincipal && slices.Equal(a.Allow, b.Allow) && slices.Equal(a.Deny, b.Deny) &&
		a.Forced == b.Forced && a.EnforcedAt.Equal(b.EnforcedAt) && a.Version == b.Version &&
		a.UpdatedAt.Equal(b.UpdatedAt) && a.UpdatedBy == b.UpdatedBy
}

// testRolloutCompareAndSet: an operation with no row reads as the zero
// Rollout; SetRollout creates version 1 and raises it by one per change,
// storing the change as given and dated by the store's clock, with one
// audit entry naming the operation, the old and new state and the
// reason; a change based on any other version is ErrRolloutStale and
// writes nothing, no audit entry either; an invalid change writes
// nothing. threat:rollout-race
func testRolloutCompareAndSet(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	if r := e.rollout(rolloutOp); !sameRollout(r, registry.Rollout{Operation: rolloutOp}) {
		t.Fatalf("Rollout with no row: %+v, want the zero Rollout of the operation", r)
	}
	if l, err := e.h.Store.Rollouts(e.ctx); err != nil || len(l) != 0 {
		t.Fatalf("Rollouts of a new registry: %+v, %v", l, err)
	}
	e.setNow(base)
	r := e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutShadow, Actor: "alice", Reason: "first look"})
	want := registry.Rollout{Operation: rolloutOp, Mode: registry.RolloutShadow, Version: 1, UpdatedAt: base, UpdatedBy: "alice"}
	if !sameRollout(r, want) {
		t.Fatalf("SetRollout shadow: %+v, want %+v", r, want)
	}
	if got := e.rollout(rolloutOp); !sameRollout(got, want) {
		t.Fatalf("Rollout after SetRollout: %+v, want %+v", got, want)
	}

	// Stale: Seen 0 once a row exists, Seen 2 while it is at 1.
	for _, seen := range []int64{0, 2, 7} {
		_, err := e.h.Store.SetRollout(e.ctx, registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutEnforce, Percent: 50, Seen: seen, Actor: "bob"})
		if !errors.Is(err, registry.ErrRolloutStale) {
			t.Errorf("SetRollout from version %d of a row at 1: %v, want ErrRolloutStale", seen, err)
		}
	}
	for _, bad := range []registry.RolloutChange{
		{Operation: rolloutOp, Mode: "on", Seen: 1, Actor: "bob"},
		{Operation: rolloutOp, Mode: registry.RolloutEnforce, Percent: 101, Seen: 1, Actor: "bob"},
		{Operation: rolloutOp, Mode: registry.RolloutEnforce, Seen: 1},
		{Operation: rolloutOp, Mode: registry.RolloutShadow, Force: true, Seen: 1, Actor: "bob"},
		{Operation: rolloutOp, Mode: registry.RolloutEnforce, Allow: []string{"a"}, Deny: []string{"a"}, Seen: 1, Actor: "bob"},
	} {
		if _, err := e.h.Store.SetRollout(e.ctx, bad); err == nil {
			t.Errorf("SetRollout(%+v) accepted an invalid change", bad)
		}
	}
	if got := e.rollout(rolloutOp); !sameRollout(got, want) {
		t.Fatalf("Rollout after refused changes: %+v, want it unchanged %+v", got, want)
	}
	if a := e.rolloutAudits(); len(a) != 1 {
		t.Fatalf("%d rollout audit entries after one change and refused ones, want 1: %+v", len(a), a)
	}

	e.setNow(base.Add(time.Second))
	c := registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutEnforce, Percent: 10, ByPrincipal: true,
		Allow: []string{"t-allow", "«ü»"}, Deny: []string{"t-deny"}, Seen: 1, Actor: "bob", Reason: "ramp"}
	r = e.setRollout(c)
	want = registry.Rollout{Operation: rolloutOp, Mode: registry.RolloutEnforce, Percent: 10, ByPrincipal: true,
		Allow: c.Allow, Deny: c.Deny, EnforcedAt: base.Add(time.Second), Version: 2, UpdatedAt: base.Add(time.Second), UpdatedBy: "bob"}
	if !sameRollout(r, want) || !sameRollout(e.rollout(rolloutOp), want) {
		t.Fatalf("SetRollout enforce: %+v (stored %+v), want %+v", r, e.rollout(rolloutOp), want)
	}
	a := e.rolloutAudits()
	if len(a) != 2 {
		t.Fatalf("%d rollout audit entries after two changes, want 2", len(a))
	}
	for i, w := range []struct{ actor, detail string }{
		{"alice", rolloutOp + ": none v0 → shadow 0% allow=[] deny=[] by-principal=false force=false; reason: first look"},
		{"bob", rolloutOp + ": shadow v1 → enforce 10% allow=[t-allow,«ü»] deny=[t-deny] by-principal=true force=false; reason: ramp"},
	} {
		if a[i].Actor != w.actor || a[i].Detail != w.detail || a[i].OperationID != "" {
			t.Errorf("audit entry %d: %+v, want actor %q detail %q", i, a[i], w.actor, w.detail)
		}
	}

	other := e.setRollout(registry.RolloutChange{Operation: "conformance.another", Mode: registry.RolloutOff, Actor: "carol"})
	l, err := e.h.Store.Rollouts(e.ctx)
	if err != nil || len(l) != 2 || !sameRollout(l[0], other) || !sameRollout(l[1], want) {
		t.Fatalf("Rollouts: %+v, %v; want the two rows ordered by operation", l, err)
	}
}

// testRolloutRace: changes racing from the same version — on a row and on
// no row — leave exactly one winner; the others get ErrRolloutStale, and
// one audit entry is written per winner. threat:rollout-race
func testRolloutRace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const n = 10
	for round, seen := range []int64{0, 1} {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = e.h.Store.SetRollout(e.ctx, registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutEnforce,
					Percent: i * 10, Seen: seen, Actor: "racer"})
			})
		}
		wg.Wait()
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, registry.ErrRolloutStale):
				t.Errorf("round %d, racer %d: %v, want nil or ErrRolloutStale", round, i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d (from version %d): %d winners, want exactly 1", round, seen, wins)
		}
		if r := e.rollout(rolloutOp); r.Version != seen+1 {
			t.Fatalf("round %d: version %d, want %d", round, r.Version, seen+1)
		}
		if a := e.rolloutAudits(); len(a) != round+1 {
			t.Fatalf("round %d: %d audit entries, want %d", round, len(a), round+1)
		}
	}
}

// testRolloutEnforcedAt: EnforcedAt is set by the first change that
// enforces someone (a percentage or an allowed tenant) and never changes
// after; shadow and enforce at 0% with no allowed tenant leave it unset.
// Off without force after enforcement is ErrForceRequired and writes
// nothing; with force it is stored Forced, EnforcedAt kept.
// threat:rollout-off-unforced
func testRolloutEnforcedAt(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	e.setNow(at(1))
	r := e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutShadow, Actor: "a"})
	e.setNow(at(2))
	r = e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutEnforce, Deny: []string{"x"}, Seen: r.Version, Actor: "a"})
	if !r.EnforcedAt.IsZero() {
		t.Fatalf("shadow, then enforce 0%% with no allowed tenant: EnforcedAt %v, want unset", r.EnforcedAt)
	}
	// Off before any enforcement needs no force.
	e.setNow(at(3))
	r = e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutOff, Seen: r.Version, Actor: "a"})
	e.setNow(at(4))
	r = e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutEnforce, Allow: []string{"vip"}, Seen: r.Version, Actor: "a"})
	if !r.EnforcedAt.Equal(at(4)) {
		t.Fatalf("enforce for an allowed tenant: EnforcedAt %v, want %v", r.EnforcedAt, at(4))
	}
	for i, c := range []registry.RolloutChange{
		{Mode: registry.RolloutEnforce, Percent: 100},
		{Mode: registry.RolloutShadow},
		{Mode: registry.RolloutEnforce, Percent: 10},
	} {
		e.setNow(at(5 + i))
		c.Operation, c.Seen, c.Actor = rolloutOp, r.Version, "a"
		r = e.setRollout(c)
		if !r.EnforcedAt.Equal(at(4)) || !e.rollout(rolloutOp).EnforcedAt.Equal(at(4)) {
			t.Fatalf("change %d after enforcement: EnforcedAt %v, want it kept at %v", i, r.EnforcedAt, at(4))
		}
	}
	before, audits := e.rollout(rolloutOp), len(e.rolloutAudits())
	_, err := e.h.Store.SetRollout(e.ctx, registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutOff, Seen: r.Version, Actor: "a"})
	if !errors.Is(err, registry.ErrForceRequired) {
		t.Fatalf("off without force after enforcement: %v, want ErrForceRequired", err)
	}
	if got := e.rollout(rolloutOp); !sameRollout(got, before) || len(e.rolloutAudits()) != audits {
		t.Fatalf("a refused off changed the row (%+v → %+v) or the audit log", before, got)
	}
	e.setNow(at(20))
	r = e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutOff, Force: true, Seen: r.Version, Actor: "a", Reason: "rollback"})
	if !r.Forced || r.Mode != registry.RolloutOff || !r.EnforcedAt.Equal(at(4)) || !e.rollout(rolloutOp).Forced {
		t.Fatalf("off with force: %+v, want Forced, EnforcedAt kept", r)
	}
	a := e.rolloutAudits()
	if last := a[len(a)-1]; !strings.Contains(last.Detail, "→ off") || !strings.Contains(last.Detail, "force=true") {
		t.Errorf("audit entry of the forced off: %q", last.Detail)
	}
	// Back to shadow: Forced goes with off.
	r = e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutShadow, Seen: r.Version, Actor: "a"})
	if r.Forced || !r.EnforcedAt.Equal(at(4)) {
		t.Fatalf("shadow after a forced off: %+v, want not Forced, EnforcedAt kept", r)
	}
}

// testRolloutMarkEnforced: MarkEnforced creates a row with Mode "" and
// EnforcedAt set, is idempotent (EnforcedAt and Version unchanged by a
// second call), sets EnforcedAt on a staged row that had none (raising
// its version), leaves a row set off without force as it is, and writes
// no audit entry; after it, off needs force.
// threat:rollout-off-unforced
func testRolloutMarkEnforced(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	r, err := e.h.Store.MarkEnforced(e.ctx, rolloutOp)
	want := registry.Rollout{Operation: rolloutOp, EnforcedAt: base, Version: 1, UpdatedAt: base}
	if err != nil || !sameRollout(r, want) || !sameRollout(e.rollout(rolloutOp), want) {
		t.Fatalf("MarkEnforced with no row: %+v, %v; want %+v", r, err, want)
	}
	e.setNow(base.Add(time.Minute))
	if r, err = e.h.Store.MarkEnforced(e.ctx, rolloutOp); err != nil || !sameRollout(r, want) {
		t.Fatalf("MarkEnforced again: %+v, %v; want it unchanged %+v", r, err, want)
	}
	if _, err := e.h.Store.SetRollout(e.ctx, registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutOff, Seen: 1, Actor: "a"}); !errors.Is(err, registry.ErrForceRequired) {
		t.Fatalf("off without force after MarkEnforced: %v, want ErrForceRequired", err)
	}

	const staged = "conformance.staged"
	s := e.setRollout(registry.RolloutChange{Operation: staged, Mode: registry.RolloutShadow, Actor: "a"})
	e.setNow(base.Add(2 * time.Minute))
	r, err = e.h.Store.MarkEnforced(e.ctx, staged)
	if err != nil || r.Mode != registry.RolloutShadow || !r.EnforcedAt.Equal(base.Add(2*time.Minute)) || r.Version != s.Version+1 {
		t.Fatalf("MarkEnforced on a shadow row: %+v, %v; want EnforcedAt set, mode kept, version raised", r, err)
	}
	if a := e.rolloutAudits(); len(a) != 1 {
		t.Fatalf("%d rollout audit entries, want 1 (MarkEnforced writes none)", len(a))
	}

	// A row an operator set off (never enforced, so without force) is
	// left as it is: no instance following it enforces the operation,
	// and the returned row says so.
	const off = "conformance.off"
	o := e.setRollout(registry.RolloutChange{Operation: off, Mode: registry.RolloutOff, Actor: "a"})
	if r, err = e.h.Store.MarkEnforced(e.ctx, off); err != nil || !sameRollout(r, o) {
		t.Fatalf("MarkEnforced on an unforced off row: %+v, %v; want it unchanged %+v", r, err, o)
	}
	if _, err := e.h.Store.MarkEnforced(e.ctx, ""); err == nil {
		t.Error("MarkEnforced of no operation succeeded")
	}
}

// testVerdictCounts: AddVerdicts from concurrent goroutines, listing
// the same totals in different orders, sums exactly and never fails
// (no deadlock between flushes), skips zero counts and refuses invalid ones writing nothing;
// Verdicts lists one operation's totals ordered by tenant, mode and
// verdict, dated by the store's clock.
func testVerdictCounts(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	if v, err := e.h.Store.Verdicts(e.ctx, rolloutOp); err != nil || len(v) != 0 {
		t.Fatalf("Verdicts of a new registry: %+v, %v", v, err)
	}
	const goroutines, rounds = 10, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				counts := []registry.VerdictCount{
					{Operation: rolloutOp, Tenant: "t-b", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 1},
					{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutEnforce, Verdict: registry.VerdictExecute, Count: int64(g + i)},
					{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutShadow, Verdict: registry.VerdictConflict, Count: 0},
					{Operation: "conformance.other", Tenant: "t-a", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 2},
				}
				if g%2 == 1 {
					// The same totals in another order: concurrent
					// flushes must not deadlock on each other's rows.
					slices.Reverse(counts)
				}
				errs <- e.h.Store.AddVerdicts(e.ctx, counts)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("AddVerdicts: %v", err)
		}
	}
	sum := int64(0)
	for g := range goroutines {
		for i := range rounds {
			sum += int64(g + i)
		}
	}
	for _, bad := range [][]registry.VerdictCount{
		{{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutEnforce, Verdict: registry.VerdictExecute, Count: 5},
			{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutEnforce, Verdict: registry.VerdictExecute, Count: -1}},
		{{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutEnforce, Verdict: "", Count: 1}},
		{{Operation: rolloutOp, Tenant: "t\x00", Mode: registry.RolloutEnforce, Verdict: registry.VerdictExecute, Count: 1}},
	} {
		if err := e.h.Store.AddVerdicts(e.ctx, bad); err == nil {
			t.Errorf("AddVerdicts(%+v) accepted an invalid count", bad)
		}
	}
	got, err := e.h.Store.Verdicts(e.ctx, rolloutOp)
	if err != nil {
		t.Fatalf("Verdicts: %v", err)
	}
	want := []registry.VerdictCount{
		{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutEnforce, Verdict: registry.VerdictExecute, Count: sum, UpdatedAt: base},
		{Operation: rolloutOp, Tenant: "t-b", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: goroutines * rounds, UpdatedAt: base},
	}
	if len(got) != len(want) {
		t.Fatalf("Verdicts: %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i].Operation != want[i].Operation || got[i].Tenant != want[i].Tenant || got[i].Mode != want[i].Mode ||
			got[i].Verdict != want[i].Verdict || got[i].Count != want[i].Count || !got[i].UpdatedAt.Equal(want[i].UpdatedAt) {
			t.Errorf("Verdicts[%d]: %+v, want %+v", i, got[i], want[i])
		}
	}
	// Ordering within a tenant: mode, then verdict.
	if err := e.h.Store.AddVerdicts(e.ctx, []registry.VerdictCount{
		{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 1},
		{Operation: rolloutOp, Tenant: "t-a", Mode: registry.RolloutEnforce, Verdict: registry.VerdictConflict, Count: 1},
		{Operation: rolloutOp, Tenant: "", Mode: registry.RolloutShadow, Verdict: registry.VerdictKeyRefused, Count: 3},
	}); err != nil {
		t.Fatalf("AddVerdicts: %v", err)
	}
	got, _ = e.h.Store.Verdicts(e.ctx, rolloutOp)
	var order []string
	for _, v := range got {
		order = append(order, v.Tenant+"/"+v.Mode+"/"+v.Verdict)
	}
	wantOrder := []string{"/shadow/key_refused", "t-a/enforce/conflict", "t-a/enforce/execute", "t-a/shadow/replay", "t-b/shadow/replay"}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("Verdicts order: %q, want %q", order, wantOrder)
	}
}

// testRolloutRulesInDatabase: a database writer going around the Store
// cannot unguard an enforced operation — not by clearing enforced_at, not
// by setting it off without forced, not by deleting its row (or, on
// PostgreSQL, truncating the table) — nor store a mode, percent or
// version out of range, nor decrease a verdict count.
// threat:rollout-guard-bypass
func testRolloutRulesInDatabase(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	r := e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutEnforce, Percent: 10, Actor: "a"})
	if r.EnforcedAt.IsZero() {
		t.Fatal("enforce 10%: EnforcedAt unset")
	}
	if err := e.h.Store.AddVerdicts(e.ctx, []registry.VerdictCount{{Operation: rolloutOp, Tenant: "t", Mode: registry.RolloutEnforce, Verdict: registry.VerdictReplay, Count: 5}}); err != nil {
		t.Fatalf("AddVerdicts: %v", err)
	}
	for _, q := range []string{
		`UPDATE idem_rollouts SET enforced_at = NULL`,
		`UPDATE idem_rollouts SET mode = 'off'`,
		`UPDATE idem_rollouts SET mode = 'off', enforced_at = NULL`,
		`DELETE FROM idem_rollouts`,
		`DELETE FROM idem_rollouts WHERE operation = '` + rolloutOp + `'`,
		`TRUNCATE idem_rollouts`, // (SQLite has no TRUNCATE: refused as unknown)
		`UPDATE idem_rollouts SET mode = 'on'`,
		`UPDATE idem_rollouts SET mode = ''`,
		`UPDATE idem_rollouts SET percent = 101`,
		`UPDATE idem_rollouts SET percent = -1`,
		`UPDATE idem_rollouts SET version = 0`,
		`UPDATE idem_rollout_verdicts SET n = n - 1`,
		`UPDATE idem_rollout_verdicts SET n = 0`,
	} {
		if err := e.h.Exec(e.ctx, q); err == nil {
			t.Errorf("%s: succeeded, want the database to refuse it", q)
		}
	}
	if got := e.rollout(rolloutOp); !sameRollout(got, r) {
		t.Fatalf("the row changed under refused statements: %+v, want %+v", got, r)
	}
	if v, _ := e.h.Store.Verdicts(e.ctx, rolloutOp); len(v) != 1 || v[0].Count != 5 {
		t.Fatalf("verdicts after refused statements: %+v, want the count of 5", v)
	}
	// Forced goes only with off: once forced off, the row cannot be
	// moved to another mode keeping forced.
	r = e.setRollout(registry.RolloutChange{Operation: rolloutOp, Mode: registry.RolloutOff, Force: true, Seen: r.Version, Actor: "a"})
	for _, q := range []string{`UPDATE idem_rollouts SET mode = 'shadow'`, `UPDATE idem_rollouts SET mode = NULL`, `UPDATE idem_rollouts SET enforced_at = NULL`} {
		if err := e.h.Exec(e.ctx, q); err == nil {
			t.Errorf("%s on a forced off row: succeeded, want the database to refuse it", q)
		}
	}
	if got := e.rollout(rolloutOp); !sameRollout(got, r) {
		t.Fatalf("the forced row changed under refused statements: %+v, want %+v", got, r)
	}
}
