package registry_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// tenantAt returns a tenant RampBucket puts below (want true) or at or
// above (false) percent of op, ramping whole tenants.
func tenantAt(t *testing.T, op string, percent int, want bool) string {
	t.Helper()
	for i := range 100000 {
		tenant := fmt.Sprintf("tenant-%d", i)
		if (registry.RampBucket(op, tenant, "") < percent*100) == want {
			return tenant
		}
	}
	t.Fatalf("no tenant with bucket below %d%%: %v", percent, want)
	return ""
}

// TestRolloutModeFor: the mode of a request from the row and the
// instance's configured mode — the row's mode when an operator set one,
// the ramp for enforce, the configured one for Mode "" or no row, and
// read-only for off (configured or set) once the operation was enforced
// unless forced. threat:rollout-off-unforced
func TestRolloutModeFor(t *testing.T) {
	const op = "payments.create"
	in, out := tenantAt(t, op, 30, true), tenantAt(t, op, 30, false)
	enforced := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	id := func(tenant string) idem.Identity { return idem.Identity{Tenant: tenant, Principal: "p"} }
	for _, c := range []struct {
		name       string
		row        registry.Rollout
		configured string
		tenant     string
		want       string
	}{
		{"no row, configured enforce", registry.Rollout{}, registry.RolloutEnforce, in, registry.RolloutEnforce},
		{"no row, configured shadow", registry.Rollout{}, registry.RolloutShadow, in, registry.RolloutShadow},
		{"no row, configured off", registry.Rollout{}, registry.RolloutOff, in, registry.RolloutOff},
		{"row shadow over configured enforce", registry.Rollout{Mode: registry.RolloutShadow}, registry.RolloutEnforce, in, registry.RolloutShadow},
		{"row off over configured enforce", registry.Rollout{Mode: registry.RolloutOff}, registry.RolloutEnforce, in, registry.RolloutOff},
		{"row enforce 30%, tenant in the ramp", registry.Rollout{Mode: registry.RolloutEnforce, Percent: 30}, registry.RolloutOff, in, registry.RolloutEnforce},
		{"row enforce 30%, tenant outside", registry.Rollout{Mode: registry.RolloutEnforce, Percent: 30}, registry.RolloutEnforce, out, registry.RolloutShadow},
		{"row enforce 100%", registry.Rollout{Mode: registry.RolloutEnforce, Percent: 100}, registry.RolloutOff, out, registry.RolloutEnforce},
		{"row enforce 0%", registry.Rollout{Mode: registry.RolloutEnforce}, registry.RolloutEnforce, in, registry.RolloutShadow},
		{"row enforce 0%, allowed", registry.Rollout{Mode: registry.RolloutEnforce, Allow: []string{out}}, registry.RolloutOff, out, registry.RolloutEnforce},
		{"row enforce 100%, denied", registry.Rollout{Mode: registry.RolloutEnforce, Percent: 100, Deny: []string{in}}, registry.RolloutEnforce, in, registry.RolloutShadow},
		{"enforced, Mode \"\", configured off", registry.Rollout{EnforcedAt: enforced}, registry.RolloutOff, in, registry.RolloutReadOnly},
		{"enforced, Mode \"\", configured shadow", registry.Rollout{EnforcedAt: enforced}, registry.RolloutShadow, in, registry.RolloutShadow},
		{"enforced, row off", registry.Rollout{Mode: registry.RolloutOff, EnforcedAt: enforced}, registry.RolloutEnforce, in, registry.RolloutReadOnly},
		{"enforced, row off forced", registry.Rollout{Mode: registry.RolloutOff, Forced: true, EnforcedAt: enforced}, registry.RolloutEnforce, in, registry.RolloutOff},
		{"enforced, row shadow, configured off", registry.Rollout{Mode: registry.RolloutShadow, EnforcedAt: enforced}, registry.RolloutOff, in, registry.RolloutShadow},
		{"enforced, row enforce 30%, tenant outside", registry.Rollout{Mode: registry.RolloutEnforce, Percent: 30, EnforcedAt: enforced}, registry.RolloutOff, out, registry.RolloutShadow},
	} {
		c.row.Operation = op
		if got := c.row.ModeFor(c.configured, id(c.tenant)); got != c.want {
			t.Errorf("%s: ModeFor(%s) = %s, want %s", c.name, c.configured, got, c.want)
		}
	}
}

// TestRolloutEnforcesLists: Allow enforces a tenant whatever its bucket,
// Deny never, whatever the percentage; a tenant in both (which Validate
// refuses) is denied.
func TestRolloutEnforcesLists(t *testing.T) {
	const op = "payments.create"
	in, out := tenantAt(t, op, 50, true), tenantAt(t, op, 50, false)
	r := registry.Rollout{Operation: op, Mode: registry.RolloutEnforce, Percent: 50}
	if !r.Enforces(idem.Identity{Tenant: in}) || r.Enforces(idem.Identity{Tenant: out}) {
		t.Fatalf("50%%: %s (bucket %d) and %s (bucket %d) not split by the ramp", in, registry.RampBucket(op, in, ""), out, registry.RampBucket(op, out, ""))
	}
	r.Allow, r.Deny = []string{out}, []string{in}
	if r.Enforces(idem.Identity{Tenant: in}) || !r.Enforces(idem.Identity{Tenant: out}) {
		t.Error("Allow and Deny do not override the ramp")
	}
	r.Percent, r.Allow, r.Deny = 100, []string{in}, []string{in}
	if r.Enforces(idem.Identity{Tenant: in}) {
		t.Error("a tenant both allowed and denied is enforced; want Deny to win")
	}
	err := registry.RolloutChange{Operation: op, Mode: registry.RolloutEnforce, Allow: []string{in}, Deny: []string{in}, Actor: "a"}.Validate()
	if err == nil {
		t.Error("Validate accepted a tenant in both lists")
	}
}

// TestRampSubset: of 2000 synthetic tenants, those enforced at 10% are
// among those at 50%, which are among those at 100% (all of them); none
// at 0%; the shares at 10% and 50% are within 3 points of the target; and
// a tenant's bucket is the same on every call. threat:rollout-ramp-flip
func TestRampSubset(t *testing.T) {
	const op, n = "payments.create", 2000
	enforced := func(percent int) map[string]bool {
		r := registry.Rollout{Operation: op, Mode: registry.RolloutEnforce, Percent: percent}
		set := map[string]bool{}
		for i := range n {
			id := idem.Identity{Tenant: fmt.Sprintf("tenant-%04d", i), Principal: fmt.Sprintf("p-%d", i%7)}
			if r.Enforces(id) {
				set[id.Tenant] = true
			}
		}
		return set
	}
	sets := map[int]map[string]bool{}
	for _, p := range []int{0, 10, 50, 100} {
		sets[p] = enforced(p)
	}
	if len(sets[0]) != 0 || len(sets[100]) != n {
		t.Fatalf("0%%: %d enforced, 100%%: %d; want 0 and %d", len(sets[0]), len(sets[100]), n)
	}
	for _, pair := range [][2]int{{10, 50}, {50, 100}} {
		for tenant := range sets[pair[0]] {
			if !sets[pair[1]][tenant] {
				t.Errorf("%s is enforced at %d%% but not at %d%%", tenant, pair[0], pair[1])
			}
		}
	}
	for _, p := range []int{10, 50} {
		share := float64(len(sets[p])) * 100 / n
		t.Logf("%d%%: %d of %d tenants enforced (%.1f%%)", p, len(sets[p]), n, share)
		if share < float64(p)-3 || share > float64(p)+3 {
			t.Errorf("%d%%: %.1f%% of the tenants enforced, want within 3 points", p, share)
		}
	}
	for i := range n {
		tenant := fmt.Sprintf("tenant-%04d", i)
		b := registry.RampBucket(op, tenant, "")
		if b < 0 || b >= 10000 || registry.RampBucket(op, tenant, "") != b {
			t.Fatalf("RampBucket(%s) = %d, then %d; want one value in [0, 10000)", tenant, b, registry.RampBucket(op, tenant, ""))
		}
	}
	// The buckets depend on the operation: a ramp of one operation does
	// not pick the same tenants as another's.
	same := 0
	for i := range n {
		tenant := fmt.Sprintf("tenant-%04d", i)
		if registry.RampBucket(op, tenant, "") < 1000 == (registry.RampBucket("refunds.create", tenant, "") < 1000) {
			same++
		}
	}
	if same == n {
		t.Error("two operations enforce exactly the same tenants at 10%")
	}
}

// TestRampByPrincipal: ByPrincipal ramps (tenant, principal) pairs, so a
// tenant's principals may be split; without it every principal of a
// tenant gets the tenant's mode. threat:rollout-ramp-flip
func TestRampByPrincipal(t *testing.T) {
	const op = "payments.create"
	r := registry.Rollout{Operation: op, Mode: registry.RolloutEnforce, Percent: 50}
	split := func(byPrincipal bool) int {
		r.ByPrincipal = byPrincipal
		n := 0
		for i := range 50 {
			tenant := fmt.Sprintf("tenant-%d", i)
			var on, off bool
			for j := range 20 {
				if r.Enforces(idem.Identity{Tenant: tenant, Principal: fmt.Sprintf("p-%d", j)}) {
					on = true
				} else {
					off = true
				}
			}
			if on && off {
				n++
			}
		}
		return n
	}
	if n := split(false); n != 0 {
		t.Errorf("by tenant: %d tenants split between enforce and shadow, want 0", n)
	}
	if n := split(true); n == 0 {
		t.Error("by principal: no tenant split between enforce and shadow")
	}
	if registry.RampBucket(op, "t", "p") == registry.RampBucket(op, "t", "") && registry.RampBucket(op, "t", "q") == registry.RampBucket(op, "t", "") {
		t.Error("the principal does not change the bucket")
	}
}

// TestRolloutEnforcing: a state enforces someone when it is enforce with
// a percentage or an allowed tenant.
func TestRolloutEnforcing(t *testing.T) {
	for _, c := range []struct {
		r    registry.Rollout
		want bool
	}{
		{registry.Rollout{}, false},
		{registry.Rollout{Mode: registry.RolloutShadow, Percent: 100}, false},
		{registry.Rollout{Mode: registry.RolloutOff, Allow: []string{"a"}}, false},
		{registry.Rollout{Mode: registry.RolloutEnforce}, false},
		{registry.Rollout{Mode: registry.RolloutEnforce, Deny: []string{"a"}}, false},
		{registry.Rollout{Mode: registry.RolloutEnforce, Percent: 1}, true},
		{registry.Rollout{Mode: registry.RolloutEnforce, Allow: []string{"a"}}, true},
	} {
		if got := c.r.Enforcing(); got != c.want {
			t.Errorf("%+v: Enforcing %v, want %v", c.r, got, c.want)
		}
	}
}

// TestRolloutChangeValidate: what a change must be to be applied.
func TestRolloutChangeValidate(t *testing.T) {
	ok := registry.RolloutChange{Operation: "payments.create", Mode: registry.RolloutEnforce, Percent: 10, Actor: "alice"}
	with := func(f func(*registry.RolloutChange)) registry.RolloutChange { c := ok; f(&c); return c }
	tenants := func(n int) []string {
		l := make([]string, n)
		for i := range l {
			l[i] = fmt.Sprintf("t%d", i)
		}
		return l
	}
	for name, c := range map[string]registry.RolloutChange{
		"minimal":              ok,
		"off with force":       with(func(c *registry.RolloutChange) { c.Mode, c.Force = registry.RolloutOff, true }),
		"percent 0":            with(func(c *registry.RolloutChange) { c.Percent = 0 }),
		"percent 100":          with(func(c *registry.RolloutChange) { c.Percent = 100 }),
		"lists":                with(func(c *registry.RolloutChange) { c.Allow, c.Deny = []string{"a", "ü"}, []string{"b"} }),
		"tenants at the bound": with(func(c *registry.RolloutChange) { c.Allow = tenants(registry.MaxRolloutTenants) }),
		"longest tenant":       with(func(c *registry.RolloutChange) { c.Deny = []string{strings.Repeat("t", registry.MaxRolloutTenantSize)} }),
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v, want valid", name, err)
		}
	}
	for name, c := range map[string]registry.RolloutChange{
		"no operation":        with(func(c *registry.RolloutChange) { c.Operation = "" }),
		"operation with NUL":  with(func(c *registry.RolloutChange) { c.Operation = "a\x00" }),
		"operation not UTF-8": with(func(c *registry.RolloutChange) { c.Operation = "\xff" }),
		"long operation":      with(func(c *registry.RolloutChange) { c.Operation = strings.Repeat("o", registry.MaxAuditField+1) }),
		"no actor":            with(func(c *registry.RolloutChange) { c.Actor = "" }),
		"no mode":             with(func(c *registry.RolloutChange) { c.Mode = "" }),
		"read-only mode":      with(func(c *registry.RolloutChange) { c.Mode = registry.RolloutReadOnly }),
		"percent -1":          with(func(c *registry.RolloutChange) { c.Percent = -1 }),
		"percent 101":         with(func(c *registry.RolloutChange) { c.Percent = 101 }),
		"force with enforce":  with(func(c *registry.RolloutChange) { c.Force = true }),
		"too many tenants":    with(func(c *registry.RolloutChange) { c.Allow, c.Deny = tenants(registry.MaxRolloutTenants), []string{"x"} }),
		"empty tenant":        with(func(c *registry.RolloutChange) { c.Allow = []string{""} }),
		"tenant with comma":   with(func(c *registry.RolloutChange) { c.Allow = []string{"a,b"} }),
		"tenant with NUL":     with(func(c *registry.RolloutChange) { c.Deny = []string{"a\x00"} }),
		"tenant not UTF-8":    with(func(c *registry.RolloutChange) { c.Deny = []string{"\xfe"} }),
		"long tenant": with(func(c *registry.RolloutChange) {
			c.Deny = []string{strings.Repeat("t", registry.MaxRolloutTenantSize+1)}
		}),
		"in both lists": with(func(c *registry.RolloutChange) { c.Allow, c.Deny = []string{"a", "b"}, []string{"b"} }),
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: valid, want an error", name)
		}
	}
}

// TestCheckRolloutChange: the checks SetRollout makes in its
// transaction — the version seen, and force for off once enforced — and
// the audit entry it writes.
func TestCheckRolloutChange(t *testing.T) {
	enforced := registry.Rollout{Operation: "op", Mode: registry.RolloutEnforce, Percent: 10, Version: 3, EnforcedAt: time.Unix(1, 0)}
	c := registry.RolloutChange{Operation: "op", Mode: registry.RolloutOff, Seen: 3, Actor: "alice", Reason: "why"}
	if err := registry.CheckRolloutChange(enforced, c); !errors.Is(err, registry.ErrForceRequired) {
		t.Errorf("off without force once enforced: %v, want ErrForceRequired", err)
	}
	c.Force = true
	if err := registry.CheckRolloutChange(enforced, c); err != nil {
		t.Errorf("off with force: %v", err)
	}
	if r := c.Result(enforced); !r.Forced || r.Version != 4 || !r.EnforcedAt.Equal(enforced.EnforcedAt) || r.UpdatedBy != "alice" {
		t.Errorf("Result of a forced off: %+v", r)
	}
	for _, seen := range []int64{0, 2, 4} {
		c.Seen = seen
		if err := registry.CheckRolloutChange(enforced, c); !errors.Is(err, registry.ErrRolloutStale) {
			t.Errorf("seen %d of version 3: %v, want ErrRolloutStale", seen, err)
		}
	}
	never := registry.Rollout{Operation: "op", Mode: registry.RolloutShadow, Version: 1}
	if err := registry.CheckRolloutChange(never, registry.RolloutChange{Operation: "op", Mode: registry.RolloutOff, Seen: 1, Actor: "a"}); err != nil {
		t.Errorf("off of a never enforced operation: %v", err)
	}
	c = registry.RolloutChange{Operation: "op", Mode: registry.RolloutEnforce, Percent: 10, Allow: []string{"a", "b"}, Seen: 3, Actor: "alice", Reason: strings.Repeat("r", 5000)}
	e := registry.RolloutAudit(enforced, c)
	if e.Action != registry.AuditRollout || e.Actor != "alice" || e.OperationID != "" || e.Validate() != nil ||
		!strings.HasPrefix(e.Detail, "op: enforce v3 → enforce 10% allow=[a,b] deny=[] by-principal=false force=false; reason: rrr") {
		t.Errorf("RolloutAudit: %+v", e)
	}
}
