package e2e

import (
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestRolloutRampLive: "idem rollout payments.create enforce --percent
// 10" on a running pair of servers on one PostgreSQL registry takes effect
// on both without a restart — a tenant the ramp selects gets 400
// KEY_MISSING for a keyless POST on both, a tenant outside executes it
// (shadow) on both — and the same for --percent 50. Over 200 tenants, the
// set each server enforces at 10 % is exactly the one RampBucket
// predicts, the same on both servers, and a subset of the set enforced
// at 50 %: no tenant flips back as the ramp grows, and the servers never
// disagree once a change is in effect.
// Proves threat:rollout-ramp-flip (docs/threat-model.md).
func TestRolloutRampLive(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	auth, tenants := writeTenants(t, 200)
	rollout(t, dsn, opCreate, "shadow") // the row before the servers start
	a := startServer(t, dsn, "--auth", auth, "--mode", opCreate+"=shadow")
	b := startServer(t, dsn, "--auth", auth, "--mode", opCreate+"=shadow")
	servers := []*server{a, b}
	pids := []int{a.child.Pid(), b.child.Pid()}

	bucket := func(tt tenantToken) int { return registry.RampBucket(opCreate, tt.tenant, "") }
	first := func(lo, hi int) tenantToken {
		for _, tt := range tenants {
			if b := bucket(tt); b >= lo && b < hi {
				return tt
			}
		}
		t.Fatalf("no tenant of the 200 has a bucket in [%d, %d)", lo, hi)
		return tenantToken{}
	}
	in10, in50, out50 := first(0, 1000), first(1000, 5000), first(5000, 10000)
	for _, s := range servers {
		if m := keylessMode(t, s, in10.token); m != "shadow" {
			t.Fatalf("before the ramp %s serves %s in %s; want shadow", s.url, in10.tenant, m)
		}
	}

	// enforced probes every tenant on every server and returns the
	// tenants served in enforce, checking that both servers agree.
	enforced := func(stage string) map[string]bool {
		var sets []map[string]bool
		for _, s := range servers {
			set := map[string]bool{}
			for _, tt := range tenants {
				if keylessMode(t, s, tt.token) == "enforce" {
					set[tt.tenant] = true
				}
			}
			sets = append(sets, set)
		}
		if !maps.Equal(sets[0], sets[1]) {
			t.Fatalf("%s: the servers enforce different tenants: %v and %v", stage, slices.Sorted(maps.Keys(sets[0])), slices.Sorted(maps.Keys(sets[1])))
		}
		return sets[0]
	}
	predicted := func(percent int) map[string]bool {
		set := map[string]bool{}
		for _, tt := range tenants {
			if bucket(tt) < percent*100 {
				set[tt.tenant] = true
			}
		}
		return set
	}

	rollout(t, dsn, opCreate, "enforce", "--percent", "10")
	awaitKeylessMode(t, servers, in10.token, "enforce")
	for _, s := range servers {
		if m := keylessMode(t, s, in50.token); m != "shadow" {
			t.Errorf("at 10 %% %s serves %s (bucket %d) in %s; want shadow", s.url, in50.tenant, bucket(in50), m)
		}
	}
	at10 := enforced("10 %")
	if want := predicted(10); !maps.Equal(at10, want) {
		t.Errorf("at 10 %% the servers enforce %d tenants %v; RampBucket selects %d: %v", len(at10), slices.Sorted(maps.Keys(at10)), len(want), slices.Sorted(maps.Keys(want)))
	}

	rollout(t, dsn, opCreate, "enforce", "--percent", "50")
	awaitKeylessMode(t, servers, in50.token, "enforce")
	for _, s := range servers {
		if m := keylessMode(t, s, out50.token); m != "shadow" {
			t.Errorf("at 50 %% %s serves %s (bucket %d) in %s; want shadow", s.url, out50.tenant, bucket(out50), m)
		}
	}
	at50 := enforced("50 %")
	if want := predicted(50); !maps.Equal(at50, want) {
		t.Errorf("at 50 %% the servers enforce %d tenants; RampBucket selects %d", len(at50), len(want))
	}
	for tenant := range at10 {
		if !at50[tenant] {
			t.Errorf("tenant %s is enforced at 10 %% but not at 50 %%", tenant)
		}
	}
	if len(at10) == 0 || len(at50) <= len(at10) || len(at50) == len(tenants) {
		t.Errorf("enforced tenants: %d at 10 %%, %d at 50 %% of %d; want a non-empty set growing with the ramp", len(at10), len(at50), len(tenants))
	}
	for i, s := range servers {
		select {
		case <-s.child.Exited():
			t.Fatalf("server %d exited during the ramp: %v", i, s.child.Wait())
		default:
		}
		if s.child.Pid() != pids[i] {
			t.Errorf("server %d was restarted", i)
		}
	}
	t.Logf("tenants enforced: %d of %d at 10 %%, %d at 50 %%", len(at10), len(tenants), len(at50))
}

// TestRolloutReadOnly: once payments.create was enforced (a server
// configured to enforce it answered — it marked the operation enforced
// in the registry first), a server started with "--mode
// payments.create=off" — a rollback to a build without idempotency —
// serves it read-only: a new key gets 503 READ_ONLY with Retry-After and
// executes nothing, the enforced key's retry replays the stored answer
// byte for byte, and a different payload for it is still refused with
// 422 PAYLOAD_CONFLICT. Only "idem rollout payments.create off --force"
// (audited) makes it write without idempotency again.
// Proves threat:rollout-off-unforced (docs/threat-model.md).
func TestRolloutReadOnly(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		f := newFault(t, dsn)
		key, memo := f.key("ro"), "ro-"+f.amount()
		body := `{"amount":"` + f.amount() + `","currency":"EUR","payee":"acct_1","memo":"` + memo + `"}`
		a := f.serve("A", nil, false) // configured enforce, the default; terminated below
		first := a.post(t, "demo", key, body)
		op := wantCreated(t, "POST to the enforcing server", first)
		terminate(t, a)

		off := f.serve("B", nil, false, "--mode", opCreate+"=off")
		newKey, newMemo := f.key("ro-new"), "ro-new-"+f.amount()
		r := off.post(t, "demo", newKey, `{"amount":"3.00","currency":"EUR","payee":"acct_1","memo":"`+newMemo+`"}`)
		wantProblem(t, "new key on the server started off", r, http.StatusServiceUnavailable, "READ_ONLY")
		if r.header.Get("Retry-After") == "" {
			t.Errorf("503 READ_ONLY without Retry-After: %v", r.header)
		}
		wantReplay(t, "the enforced key's retry on the server started off", first, off.post(t, "demo", key, body))
		wantProblem(t, "another payload for the enforced key", off.post(t, "demo", key, `{"amount":"9.99","currency":"EUR","payee":"acct_1"}`),
			http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")
		if n := paymentsWithMemo(t, dsn, newMemo); n != 0 {
			t.Errorf("the refused new key left %d payments", n)
		}
		if n := paymentsWithMemo(t, dsn, memo); n != 1 {
			t.Errorf("the enforced key has %d payments; want 1 (operation %s)", n, op)
		}
		terminate(t, off)

		rollout(t, dsn, opCreate, "off", "--force", "--reason", "e2e: rollback to a build without idempotency")
		forced := f.serve("C", nil, true, "--mode", opCreate+"=off")
		r = forced.post(t, "demo", newKey, `{"amount":"3.00","currency":"EUR","payee":"acct_1","memo":"`+newMemo+`"}`)
		if r.status != http.StatusCreated {
			t.Errorf("new key after off --force: %v; want 201 (no idempotency)", r)
		}
	})
}
