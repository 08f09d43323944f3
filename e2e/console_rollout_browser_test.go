package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/browser"
	"github.com/idemkit/idem/registry"
)

// TestConsoleRolloutBrowser: in a real headless Chromium, with
// JavaScript on and off, an operator opens the console's Rollout page of
// "idem serve", sees a row for each of the service's operations, ramps
// payments.create to enforce 10 % through its change form (the row
// shows it, version 1, changed by the operator, and the status page's
// audit log has the rollout.set entry under the operator's name); a form
// left open while someone else changed the row is refused (409
// ROLLOUT_STALE, nothing changed); and the operation's report draws the
// verdict counts as a chart, a shadow and an enforce bar per verdict.
//
// threat:rollout-stale-view threat:rollout-change-unaccountable
func TestConsoleRolloutBrowser(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []browser.Option
	}{{"js", nil}, {"nojs", []browser.Option{browser.NoJavaScript()}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "rollout.db")
			c := startConsole(t, dsn)
			store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			ctx := browser.New(t, tc.opts...)
			c.rolloutPage(ctx, store)
		})
	}
}

// rolloutPage is the operator's part of TestConsoleRolloutBrowser.
func (c *consoleRun) rolloutPage(ctx context.Context, store registry.Store) {
	t := c.t
	const op = "payments.create"
	row := `tr.rollout[data-operation="` + op + `"]`
	form := `form.rollout-form[data-operation="` + op + `"]`
	c.do(ctx, "log in and open the Rollout page",
		chromedp.Navigate(c.admin+"/login"),
		chromedp.WaitVisible(chromedp.CSS("form#login")),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), c.token),
		browser.ClickNavigate("#login-submit"),
		chromedp.WaitVisible(chromedp.CSS("#unknown-count")),
		browser.ClickNavigate("a#nav-rollouts"),
		chromedp.WaitVisible(chromedp.CSS("table#rollouts")),
		browser.Capture("rollouts"))
	for _, name := range []string{"payments.create", "payments.refund", "transfers.create"} {
		c.wantText(ctx, `tr.rollout[data-operation="`+name+`"] td.mode`, "configured")
	}
	c.wantText(ctx, row+" td.version", "0")

	c.do(ctx, "ramp payments.create to enforce 10 %",
		chromedp.SetValue(chromedp.CSS(form+` select[name="mode"]`), "enforce"),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="percent"]`), "10"),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="tenants"]`), "pilot"),
		chromedp.SendKeys(chromedp.CSS(form+` input[name="reason"]`), "OPS-812 ramp"),
		browser.ClickNavigate(form+" button.rollout-submit"),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
		browser.Capture("after-change"))
	for sel, want := range map[string]string{"td.mode": "enforce", "td.percent": "10", "td.allow": "pilot", "td.version": "1", "td.updated-by": consoleOperator} {
		c.wantText(ctx, row+" "+sel, want)
	}
	if r, err := store.Rollout(t.Context(), op); err != nil || r.Mode != registry.RolloutEnforce || r.Percent != 10 || r.UpdatedBy != consoleOperator || r.EnforcedAt.IsZero() {
		t.Fatalf("row after the form: %+v (%v)", r, err)
	}

	// Someone else ramps to 50 % while the page still shows version 1.
	if _, err := store.SetRollout(t.Context(), registry.RolloutChange{Operation: op, Mode: registry.RolloutEnforce, Percent: 50, Seen: 1, Actor: "bob"}); err != nil {
		t.Fatal(err)
	}
	c.do(ctx, "submit the stale form",
		chromedp.SetValue(chromedp.CSS(form+` select[name="mode"]`), "shadow"),
		browser.ClickNavigate(form+" button.rollout-submit"),
		chromedp.WaitVisible(chromedp.CSS("#error")),
		browser.Capture("stale"))
	if code := browserValue(c, ctx, "the error's code", chromedp.AttributeValue(chromedp.CSS("#error"), "data-code")).Value; code != "ROLLOUT_STALE" {
		t.Errorf("stale form: #error data-code %q; want ROLLOUT_STALE", code)
	}
	c.wantText(ctx, row+" td.percent", "50")
	if r, _ := store.Rollout(t.Context(), op); r.Mode != registry.RolloutEnforce || r.Version != 2 {
		t.Errorf("the stale form changed the row: %+v", r)
	}

	c.do(ctx, "the status page's audit log",
		browser.ClickNavigate("a#nav-status"),
		chromedp.WaitVisible(chromedp.CSS("table.audit")))
	audit := browserValue(c, ctx, "the audit log", chromedp.OuterHTML(chromedp.CSS("table.audit")))
	if !strings.Contains(audit, `data-action="rollout.set"><td class="at">`) ||
		!strings.Contains(audit, `<td class="actor">`+consoleOperator+`</td><td class="action">rollout.set</td>`) || !strings.Contains(audit, "OPS-812 ramp (console)") {
		t.Errorf("the audit log lacks the operator's rollout.set entry:\n%s", audit)
	}

	if err := store.AddVerdicts(t.Context(), []registry.VerdictCount{
		{Operation: op, Tenant: "pilot", Mode: registry.RolloutShadow, Verdict: registry.VerdictReplay, Count: 6},
		{Operation: op, Tenant: "pilot", Mode: registry.RolloutEnforce, Verdict: registry.VerdictReplay, Count: 4},
	}); err != nil {
		t.Fatal(err)
	}
	c.do(ctx, "open the report",
		chromedp.Navigate(c.admin+"/rollouts/"+op),
		chromedp.WaitVisible(chromedp.CSS("#verdicts-chart svg")),
		browser.Capture("report"))
	for label, want := range map[string]string{"replay · shadow": "6", "replay · enforce": "4", "conflict · shadow": "0"} {
		sel := `#verdicts-chart rect.bar[data-label="` + label + `"]`
		if got := browserValue(c, ctx, "the bar "+label, chromedp.AttributeValue(chromedp.CSS(sel), "data-count")).Value; got != want {
			t.Errorf("bar %q: data-count %q; want %s", label, got, want)
		}
		if label != "conflict · shadow" {
			if box := browserValue(c, ctx, "the size of "+sel, chromedp.Dimensions(chromedp.CSS(sel))); box == nil || box.Width <= 0 || box.Height <= 0 {
				t.Errorf("bar %q is drawn %+v; want a non-zero size", label, box)
			}
		}
	}
	c.wantText(ctx, `tr.verdict[data-tenant="pilot"][data-verdict="replay"] td.shadow`, "6")
	c.wantText(ctx, `tr.verdict[data-tenant="pilot"][data-verdict="replay"] td.enforce`, "4")
}
