package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// rolloutOp is the operation the Rollout tests change.
const rolloutOp = "payments.create"

// rolloutEnvs runs fn once per driver with a console whose
// Config.Operations names rolloutOp.
func rolloutEnvs(t *testing.T, fn func(t *testing.T, e *env)) {
	pgtest.EachDriver(t, "rollout.db", func(t *testing.T, _, dsn string) {
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		fn(t, newEnv(t, store, effect.Answer{}, func(c *console.Config) { c.Operations = []string{rolloutOp} }))
	})
}

// rolloutForm is the change form of rolloutOp with the version seen.
func rolloutForm(csrf, version, mode string, extra ...string) url.Values {
	f := url.Values{"csrf": {csrf}, "version": {version}, "mode": {mode}}
	for i := 0; i+1 < len(extra); i += 2 {
		f.Set(extra[i], extra[i+1])
	}
	return f
}

// rowCell returns the text of a cell of the rollout table's row of op.
func rowCell(body, op, class string) string {
	re := regexp.MustCompile(`<tr class="rollout" data-operation="` + regexp.QuoteMeta(op) + `">.*?<td class="` + class + `">([^<]*)</td>`)
	if m := re.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return "(no such cell)"
}

// TestRolloutPage: the Rollout page lists an operation of
// Config.Operations before it has a row (configured, version 0), with a
// change form carrying that version; a change through the form is set in
// the registry and audited under the logged-in operator; a form based
// on a version that is no longer the row's is refused (409
// ROLLOUT_STALE) and changes nothing; off on an enforced operation needs
// force (409 FORCE_REQUIRED); a form without the CSRF token changes
// nothing.
// Proves threat:rollout-stale-view and
// threat:rollout-change-unaccountable (docs/threat-model.md).
func TestRolloutPage(t *testing.T) {
	t.Parallel()
	rolloutEnvs(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		c, csrf := e.login(aliceToken)
		code, _, body := e.do(c, "/admin/rollouts", nil)
		if code != http.StatusOK || rowCell(body, rolloutOp, "mode") != "configured" || rowCell(body, rolloutOp, "version") != "0" ||
			!strings.Contains(body, `<input type="hidden" name="version" value="0">`) || !strings.Contains(body, `id="nav-rollouts"`) {
			t.Fatalf("rollout page: %d %s", code, body)
		}
		row := func() registry.Rollout {
			r, err := e.store.Rollout(ctx, rolloutOp)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		path := "/admin/rollouts/" + rolloutOp

		if code, _, body := e.do(c, "/admin/rollouts/payments.crate", rolloutForm(csrf, "0", "shadow")); code != http.StatusNotFound || errorCode(body) != "NOT_FOUND" {
			t.Errorf("a change of an operation the service does not serve: %d %q", code, errorCode(body))
		}
		if rs, _ := e.store.Rollouts(ctx); len(rs) != 0 {
			t.Fatalf("rows after refused changes: %+v", rs)
		}
		if code, _, body := e.do(c, path, rolloutForm("", "0", "shadow")); code != http.StatusForbidden || errorCode(body) != "CSRF_INVALID" || row().Version != 0 {
			t.Fatalf("form without CSRF: %d %q, row %+v", code, errorCode(body), row())
		}
		code, loc, body := e.do(c, path, rolloutForm(csrf, "0", "enforce", "percent", "10", "tenants", "acme, zeta", "deny", "beta", "reason", "ramp step 1"))
		if code != http.StatusSeeOther {
			t.Fatalf("change: %d %s", code, body)
		}
		if r := row(); r.Mode != registry.RolloutEnforce || r.Percent != 10 || !slices.Equal(r.Allow, []string{"acme", "zeta"}) ||
			!slices.Equal(r.Deny, []string{"beta"}) || r.Version != 1 || r.UpdatedBy != "alice" || r.EnforcedAt.IsZero() {
			t.Fatalf("row after the change: %+v", r)
		}
		if _, _, body := e.do(c, loc, nil); !strings.Contains(body, `id="flash"`) || rowCell(body, rolloutOp, "mode") != "enforce" ||
			rowCell(body, rolloutOp, "percent") != "10" || rowCell(body, rolloutOp, "version") != "1" || rowCell(body, rolloutOp, "updated-by") != "alice" {
			t.Errorf("page after the change: %s", body)
		}
		log, err := e.store.AuditLog(ctx, registry.AuditFilter{Limit: 10})
		if err != nil || len(log) == 0 || log[0].Action != registry.AuditRollout || log[0].Actor != "alice" || !strings.Contains(log[0].Detail, "ramp step 1") {
			t.Fatalf("audit log after the change: %+v (%v)", log, err)
		}

		// bob's page still showed version 0: his change is refused.
		bc, bcsrf := e.login(bobToken)
		code, _, body = e.do(bc, path, rolloutForm(bcsrf, "0", "shadow"))
		if code != http.StatusConflict || errorCode(body) != "ROLLOUT_STALE" || rowCell(body, rolloutOp, "version") != "1" {
			t.Errorf("stale form: %d %q %s", code, errorCode(body), body)
		}
		if r := row(); r.Mode != registry.RolloutEnforce || r.Version != 1 {
			t.Errorf("a stale form changed the row: %+v", r)
		}

		code, _, body = e.do(bc, path, rolloutForm(bcsrf, "1", "off"))
		if code != http.StatusConflict || errorCode(body) != "FORCE_REQUIRED" || row().Version != 1 {
			t.Errorf("off without force: %d %q, row %+v", code, errorCode(body), row())
		}
		if code, _, body := e.do(bc, path, rolloutForm(bcsrf, "1", "off", "force", "yes", "reason", "INC-9")); code != http.StatusSeeOther {
			t.Fatalf("off with force: %d %s", code, body)
		}
		if r := row(); r.Mode != registry.RolloutOff || !r.Forced || r.Version != 2 || r.UpdatedBy != "bob" {
			t.Errorf("row after off with force: %+v", r)
		}
		if log, _ := e.store.AuditLog(ctx, registry.AuditFilter{Limit: 10}); len(log) == 0 || log[0].Action != registry.AuditRollout || log[0].Actor != "bob" {
			t.Errorf("audit log after off with force: %+v", log)
		}
	})
}

// TestRolloutReport: an operation's report page draws the verdict
// totals of every tenant as a chart, a shadow and an enforce bar per
// verdict with their counts, and lists them per tenant (a request
// refused before its caller was known under "no identity").
func TestRolloutReport(t *testing.T) {
	t.Parallel()
	rolloutEnvs(t, func(t *testing.T, e *env) {
		c, _ := e.login(bobToken)
		if _, _, body := e.do(c, "/admin/rollouts/"+rolloutOp, nil); !strings.Contains(body, "No verdict is counted yet") {
			t.Errorf("report without counts: %s", body)
		}
		if err := e.store.AddVerdicts(t.Context(), []registry.VerdictCount{
			{Operation: rolloutOp, Tenant: "acme", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 3},
			{Operation: rolloutOp, Tenant: "beta", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 4},
			{Operation: rolloutOp, Tenant: "acme", Mode: registry.RolloutEnforce, Verdict: registry.VerdictReplay, Count: 5},
			{Operation: rolloutOp, Tenant: "acme", Mode: registry.RolloutShadow, Verdict: registry.VerdictConflict, Count: 2},
			{Operation: rolloutOp, Tenant: "", Mode: registry.RolloutShadow, Verdict: registry.VerdictKeyRefused, Count: 2},
			{Operation: "other.op", Tenant: "acme", Mode: registry.RolloutShadow, Verdict: registry.VerdictConflict, Count: 50},
		}); err != nil {
			t.Fatal(err)
		}
		code, _, body := e.do(c, "/admin/rollouts/"+rolloutOp, nil)
		if code != http.StatusOK {
			t.Fatalf("report: %d %s", code, body)
		}
		bars := map[string]string{}
		for _, m := range regexp.MustCompile(`<rect class="bar[^"]*" data-label="([^"]+)" data-count="(\d+)"`).FindAllStringSubmatch(body, -1) {
			bars[m[1]] = m[2]
		}
		for label, want := range map[string]string{"replay · shadow": "7", "replay · enforce": "5", "conflict · shadow": "2",
			"conflict · enforce": "0", "execute · shadow": "0"} {
			if bars[label] != want {
				t.Errorf("chart bar %q: count %q, want %s (bars %v)", label, bars[label], want, bars)
			}
		}
		for _, want := range []string{
			`data-tenant="acme" data-verdict="replay"><td>acme</td><td>replay</td><td class="shadow">3</td><td class="enforce">5</td>`,
			`data-tenant="beta" data-verdict="replay"><td>beta</td><td>replay</td><td class="shadow">4</td><td class="enforce">0</td>`,
			`<tr class="verdict all total" data-verdict="total"><th>every tenant</th><td>total</td><td class="shadow">11</td><td class="enforce">5</td>`,
			`data-tenant="" data-verdict="key_refused"><td><em>no identity</em></td><td>key_refused</td><td class="shadow">2</td><td class="enforce">0</td>`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("report lacks %s", want)
			}
		}
	})
}
