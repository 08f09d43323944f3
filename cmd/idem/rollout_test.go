package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// openRolloutStore opens a second store on the CLI's database, to check
// what the commands wrote and to add verdict counts as servers do.
func openRolloutStore(t *testing.T, dsn string) registry.Store {
	t.Helper()
	st, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

// tableRow returns the fields of the first line of out whose first
// fields are prefix, or nil.
func tableRow(out string, prefix ...string) []string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= len(prefix) && slices.Equal(f[:len(prefix)], prefix) {
			return f
		}
	}
	return nil
}

// TestRolloutSetStatusReport: a change made with "idem rollout OP MODE"
// is the row "idem rollout status" prints and the store holds (percent,
// lists, version, actor); lists are kept when not given; "idem rollout
// report" prints each tenant's shadow predictions beside enforce's
// answers, and the totals.
func TestRolloutSetStatusReport(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		st := openRolloutStore(t, dsn)
		code, out, stderr := runCmd(t, "", "rollout", "status", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "no rollout rows") {
			t.Fatalf("status on an empty registry: code %d, out %q, stderr %q", code, out, stderr)
		}
		code, out, stderr = runCmd(t, "", "rollout", "payments.create", "shadow", "--actor", "alice", "--reason", "observe first", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "payments.create: configured (no mode set: each instance uses its --mode) -> shadow (version 0 -> 1)") ||
			!strings.Contains(stderr, "note: no instance has reported serving payments.create yet") {
			t.Fatalf("rollout shadow: code %d, out %q, stderr %q", code, out, stderr)
		}
		code, out, stderr = runCmd(t, "", "rollout", "payments.create", "enforce", "--percent", "10", "--tenants", "acme, zeta",
			"--deny-tenants", "beta", "--expect-version", "1", "--actor", "alice", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "-> enforce 10% (by tenant; always acme,zeta; never beta) (version 1 -> 2)") ||
			!strings.Contains(out, "first enforced at ") {
			t.Fatalf("rollout enforce 10: code %d, out %q, stderr %q", code, out, stderr)
		}
		code, out, stderr = runCmd(t, "", "rollout", "payments.create", "enforce", "--percent", "50", "--actor", "bob", "--db", dsn)
		if code != exitOK {
			t.Fatalf("rollout enforce 50: code %d, out %q, stderr %q", code, out, stderr)
		}
		row, err := st.Rollout(t.Context(), "payments.create")
		if err != nil || row.Mode != registry.RolloutEnforce || row.Percent != 50 || !slices.Equal(row.Allow, []string{"acme", "zeta"}) ||
			!slices.Equal(row.Deny, []string{"beta"}) || row.Version != 3 || row.UpdatedBy != "bob" || row.EnforcedAt.IsZero() {
			t.Fatalf("row after enforce 50 (lists not given: kept): %+v (%v)", row, err)
		}
		code, out, stderr = runCmd(t, "", "rollout", "status", "--db", dsn)
		if f := tableRow(out, "payments.create"); code != exitOK || len(f) < 10 ||
			!slices.Equal(f[:7], []string{"payments.create", "enforce", "50", "no", "acme,zeta", "beta", "no"}) || f[8] != "3" || f[9] != "bob" {
			t.Fatalf("status: code %d, row %q, out %q, stderr %q", code, f, out, stderr)
		}

		if err := st.AddVerdicts(t.Context(), []registry.VerdictCount{
			{Operation: "payments.create", Tenant: "acme", Mode: registry.RolloutShadow, Verdict: registry.VerdictExecute, Count: 7},
			{Operation: "payments.create", Tenant: "acme", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 3},
			{Operation: "payments.create", Tenant: "acme", Mode: registry.RolloutEnforce, Verdict: registry.VerdictReplay, Count: 2},
			{Operation: "payments.create", Tenant: "beta", Mode: registry.RolloutShadow, Verdict: registry.VerdictConflict, Count: 4},
			{Operation: "payments.create", Tenant: "beta", Mode: registry.RolloutEnforce, Verdict: registry.VerdictKeyRefused, Count: 5},
			{Operation: "transfers.create", Tenant: "acme", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 100},
		}); err != nil {
			t.Fatal(err)
		}
		code, out, stderr = runCmd(t, "", "rollout", "report", "payments.create", "--db", dsn)
		if code != exitOK || !strings.HasPrefix(out, "payments.create: enforce 50%") {
			t.Fatalf("report: code %d, out %q, stderr %q", code, out, stderr)
		}
		for _, want := range [][]string{
			{"acme", "execute", "7", "0"}, {"acme", "replay", "3", "2"}, {"acme", "(total)", "10", "2"},
			{"beta", "conflict", "4", "0"}, {"beta", "key_refused", "0", "5"}, {"beta", "(total)", "4", "5"},
			{"(all)", "execute", "7", "0"}, {"(all)", "replay", "3", "2"}, {"(all)", "conflict", "4", "0"},
			{"(all)", "in_flight", "0", "0"}, {"(all)", "key_refused", "0", "5"}, {"(all)", "(total)", "14", "7"},
		} {
			if f := tableRow(out, want[:2]...); !slices.Equal(f, want) {
				t.Errorf("report line %q: got %q in\n%s", want, f, out)
			}
		}
		if f := tableRow(out, "acme", "conflict"); f != nil {
			t.Errorf("report lists a verdict acme never had: %q", f)
		}
	})
}

// TestRolloutRace: two commands changing the rollout from the same
// --expect-version — exactly one wins (exit 0), the other is refused as
// stale (exit 3) and changes nothing.
// Proves threat:rollout-stale-view (docs/threat-model.md).
func TestRolloutRace(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		st := openRolloutStore(t, dsn)
		if code, out, stderr := runCmd(t, "", "rollout", "payments.create", "shadow", "--db", dsn); code != exitOK {
			t.Fatalf("rollout shadow: code %d, out %q, stderr %q", code, out, stderr)
		}
		percents := []string{"10", "50"}
		codes, errs := make([]int, 2), make([]string, 2)
		var wg sync.WaitGroup
		for i, p := range percents {
			wg.Go(func() {
				var out, errb strings.Builder
				codes[i] = run(context.Background(), []string{"rollout", "payments.create", "enforce", "--percent", p, "--expect-version", "1",
					"--actor", "op-" + p, "--db", dsn}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
				errs[i] = errb.String()
			})
		}
		wg.Wait()
		row, err := st.Rollout(t.Context(), "payments.create")
		if err != nil {
			t.Fatal(err)
		}
		winner := slices.Index(codes, exitOK)
		loser := 1 - winner
		if winner < 0 || codes[loser] != exitStale || !strings.Contains(errs[loser], "STALE: payments.create changed since version 1 (it is at version 2") {
			t.Fatalf("codes %v, stderr %q: want one 0 and one %d", codes, errs, exitStale)
		}
		if row.Version != 2 || strconv.Itoa(row.Percent) != percents[winner] || row.UpdatedBy != "op-"+percents[winner] {
			t.Errorf("row %+v: want version 2 set by the winner, op-%s", row, percents[winner])
		}
		// A stale version given by hand is refused before anything is read as the base.
		if code, _, stderr := runCmd(t, "", "rollout", "payments.create", "shadow", "--expect-version", "1", "--db", dsn); code != exitStale ||
			!strings.Contains(stderr, "nothing was changed") {
			t.Errorf("stale --expect-version: code %d, stderr %q", code, stderr)
		}
		if after, _ := st.Rollout(t.Context(), "payments.create"); after.Version != 2 {
			t.Errorf("a stale change wrote: %+v", after)
		}
	})
}

// TestRolloutOffNeedsForce: once enforced, off without --force is
// refused (exit 4, nothing changed); with --force it is set, forced, and
// both changes are in the audit log ("idem ops audit") under their
// actors.
// Proves threat:rollout-change-unaccountable (docs/threat-model.md).
func TestRolloutOffNeedsForce(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		st := openRolloutStore(t, dsn)
		if code, out, stderr := runCmd(t, "", "rollout", "payments.create", "enforce", "--actor", "alice", "--db", dsn); code != exitOK {
			t.Fatalf("rollout enforce: code %d, out %q, stderr %q", code, out, stderr)
		}
		code, _, stderr := runCmd(t, "", "rollout", "payments.create", "off", "--actor", "bob", "--db", dsn)
		if code != exitForce || !strings.Contains(stderr, "FORCE_REQUIRED: payments.create has been enforced") {
			t.Fatalf("off without --force: code %d, stderr %q", code, stderr)
		}
		if row, _ := st.Rollout(t.Context(), "payments.create"); row.Mode != registry.RolloutEnforce || row.Version != 1 {
			t.Fatalf("off without --force changed the row: %+v", row)
		}
		code, out, stderr := runCmd(t, "", "rollout", "payments.create", "off", "--force", "--reason", "INC-42 rollback", "--actor", "bob", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "turned off by force") {
			t.Fatalf("off --force: code %d, out %q, stderr %q", code, out, stderr)
		}
		if row, _ := st.Rollout(t.Context(), "payments.create"); row.Mode != registry.RolloutOff || !row.Forced || row.EnforcedAt.IsZero() {
			t.Fatalf("row after off --force: %+v", row)
		}
		code, out, stderr = runCmd(t, "", "ops", "audit", "--db", dsn)
		if code != exitOK {
			t.Fatalf("ops audit: code %d, stderr %q", code, stderr)
		}
		var entries []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, registry.AuditRollout) {
				entries = append(entries, l)
			}
		}
		if len(entries) != 2 || !strings.Contains(entries[0], "bob") || !strings.Contains(entries[0], "INC-42 rollback") ||
			!strings.Contains(entries[1], "alice") {
			t.Errorf("audit log: rollout entries %q, want bob's forced off (with its reason) above alice's enforce:\n%s", entries, out)
		}
	})
}

// TestRolloutUsage: bad invocations exit 2 and change nothing.
func TestRolloutUsage(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + t.TempDir() + "/usage.db"
	for _, args := range [][]string{
		{"rollout"},
		{"rollout", "payments.create"},
		{"rollout", "payments.create", "sideways"},
		{"rollout", "payments.create", "shadow", "--percent", "10"},
		{"rollout", "status", "--percent", "10"},
		{"rollout", "report"},
		{"rollout", "payments.create", "enforce", "--expect-version", "-2"},
		{"rollout", "payments.create", "enforce", "--actor", ""},
	} {
		if code, out, stderr := runCmd(t, "", append(args, "--db", db)...); code != exitUsage || out != "" || !strings.Contains(stderr, "usage: idem rollout ") {
			t.Errorf("%q: code %d, out %q, stderr %q; want usage, exit 2", args, code, out, stderr)
		}
	}
	// An invalid change (percent out of range) is refused by Validate: exit 1.
	if code, _, stderr := runCmd(t, "", "rollout", "payments.create", "enforce", "--percent", "101", "--db", db); code != exitRefused ||
		!strings.Contains(stderr, "percent 101") {
		t.Errorf("--percent 101: code %d, stderr %q", code, stderr)
	}
}
