package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/internal/browser"
)

// TestConsoleOnCallBrowser (issue 27): what the on-call engineer sees, in
// a real headless Chromium, 1,280 px wide.
//
// The transfer is made UNKNOWN as in TestConsoleBrowser, then the
// provider is stopped and one round of "idem recover" runs against it:
// its lookup is refused. Then:
//
//   - the operation's page says why it is UNKNOWN: the last attempt's
//     error ("connection refused"), the next attempt's time (after the
//     last one's) and the recorded lookup of the recovery worker; the
//     tenant by name (alice has show_tenants); lease and expiry times
//     marked past or future;
//   - the status page says "no relay configured" (no --webhook), no lag;
//   - a lookup with the provider down ends on the operation's page
//     (POST-redirect-GET), LOOKUP_FAILED shown there;
//   - a 3,000-character operation ID on the not-found page keeps the page
//     within 1,280 px (document scrollWidth), and a right-to-left
//     override in an ID does not reverse the text after it (the "." that
//     follows stays right of the ID);
//   - evidence over 64 KiB is 413 FORM_TOO_LARGE naming the limit, not
//     CSRF_INVALID;
//   - 3,000 characters of evidence without a space wrap within 1,280 px
//     once the operation is reconciled.
//
// threat:unknown-without-reason threat:bidi-id-spoofing
func TestConsoleOnCallBrowser(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "oncall.db")
	c := startConsoleArgs(t, dsn, nil)
	c.makeUnknown()
	c.prov.stop(t)
	if out, err := exec.Command(idemBin, "recover", "--once", "--db", dsn, "--provider", c.prov.url, "--provider-timeout", "2s").CombinedOutput(); err != nil {
		t.Fatalf("idem recover --once: %v\n%s", err, out)
	}
	ctx := browser.New(t)
	c.do(ctx, "log in",
		chromedp.Navigate(c.admin+"/login"),
		chromedp.WaitVisible(chromedp.CSS("form#login")),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), c.token),
		browser.ClickNavigate("#login-submit"),
		chromedp.WaitVisible(chromedp.CSS("#unknown-count")),
		browser.Capture("status"))

	// No --webhook: no relay, said so.
	if got := c.text(ctx, "#relay-none"); !strings.HasPrefix(got, "no relay configured") {
		t.Errorf("status page's relay: %q; want \"no relay configured …\"", got)
	}
	if n := browserValue(c, ctx, "relay lag cells", chromedp.Evaluate[int](`document.querySelectorAll("#relay-lag, #outbox-pending").length`)); n != 0 {
		t.Errorf("status page shows a relay lag without a relay (%d cells)", n)
	}

	// Why it is UNKNOWN.
	page := c.admin + "/operations/" + c.op
	c.do(ctx, "the operation's page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#recovery-attempt")), browser.Capture("unknown"))
	if got := c.text(ctx, "#last-error"); !strings.Contains(got, "connection refused") {
		t.Errorf("#last-error %q; want the refused lookup's error", got)
	}
	last := c.datetime(ctx, "#last-attempt time")
	next := c.datetime(ctx, "#next-attempt time")
	if !next.After(last) {
		t.Errorf("next attempt %v, last %v; want the next after the last", next, last)
	}
	c.wantText(ctx, "#attempts", "1")
	if got := c.text(ctx, `tr.recorded-lookup[data-answer="no answer"] td.actor`); got != "recovery" {
		t.Errorf("recorded lookups: the recovery worker's refused lookup is not listed (actor %q)", got)
	}
	c.wantText(ctx, "#tenant-name", "demo")
	for _, sel := range []string{"#lease-until time", "#expires time", "#created time"} {
		side := browserValue(c, ctx, sel, chromedp.AttributeValue(chromedp.CSS(sel), "data-when")).Value
		txt := c.text(ctx, sel)
		if at := c.datetime(ctx, sel); (side == "past") != at.Before(time.Now()) || (side == "past") != strings.HasSuffix(txt, "ago)") ||
			(side == "future") != strings.Contains(txt, "(in ") {
			t.Errorf("%s: %q marked %q; want past (\"… ago\") or future (\"in …\") as the time is", sel, txt, side)
		}
	}

	// A lookup ends in a redirect to the page, the failure shown there.
	c.do(ctx, "ask the stopped provider",
		browser.ClickNavigate(`tr.effect form.lookup button`),
		chromedp.WaitVisible(chromedp.CSS("#error")),
		browser.Capture("lookup-failed"))
	if loc := browserValue(c, ctx, "location", chromedp.Location()); !strings.HasPrefix(loc, page+"?") {
		t.Errorf("after the lookup the browser is at %s; want the operation's page", loc)
	}
	if code := browserValue(c, ctx, "error code", chromedp.AttributeValue(chromedp.CSS("#error"), "data-code")).Value; code != "LOOKUP_FAILED" {
		t.Errorf("after the lookup #error is %q; want LOOKUP_FAILED", code)
	}

	// A 3,000-character ID fits; a right-to-left override stays in its ID.
	long := strings.Repeat("a", 1500) + strings.Repeat("\u202e", 1) + strings.Repeat("b", 1499)
	c.do(ctx, "a 3,000-character ID", chromedp.Navigate(c.admin+"/operations/"+long), chromedp.WaitVisible(chromedp.CSS("#error")), browser.Capture("long-id"))
	c.wantFits(ctx, "the not-found page of a 3,000-character ID")
	c.do(ctx, "an ID with a right-to-left override", chromedp.Navigate(c.admin+"/operations/abc\u202edef"), chromedp.WaitVisible(chromedp.CSS("#error .after")), browser.Capture("rtl-id"))
	geo := browserValue(c, ctx, "the ID's and the following text's boxes", chromedp.Evaluate[[]float64](
		`(() => { const id = document.querySelector("#error bdi.id, #error .id").getBoundingClientRect(); const after = document.querySelector("#error .after").getBoundingClientRect(); return [id.left, id.right, after.left, after.right]; })()`))
	if len(geo) != 4 || geo[2] < geo[1]-0.5 {
		t.Errorf("the text after an ID with U+202E is drawn at %v; want it right of the ID (the override reversed the rest of the line)", geo)
	}

	// A form over 64 KiB names the limit.
	c.do(ctx, "reconcile with 70,000 characters of evidence",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS("form#reconcile")),
		chromedp.Click(chromedp.CSS(`input[name="outcome"][value="succeeded"]`)),
		chromedp.SetValue(chromedp.CSS(`textarea[name="evidence"]`), "OPS-1 "+strings.Repeat("x", 70000)),
		browser.ClickNavigate("#reconcile-submit"),
		chromedp.WaitVisible(chromedp.CSS("#error")),
		browser.Capture("form-too-large"))
	if code := browserValue(c, ctx, "error code", chromedp.AttributeValue(chromedp.CSS("#error"), "data-code")).Value; code != "FORM_TOO_LARGE" {
		t.Errorf("evidence over 64 KiB: #error %q; want FORM_TOO_LARGE", code)
	}
	if msg := c.text(ctx, "#error"); !strings.Contains(msg, "64 KiB") {
		t.Errorf("evidence over 64 KiB: %q; want the limit named", msg)
	}

	// Long evidence without a space wraps.
	evidence := "OPS-4711 " + strings.Repeat("y", 3000)
	c.do(ctx, "reconcile with 3,000 characters of evidence",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS("form#reconcile")),
		chromedp.Click(chromedp.CSS(`input[name="outcome"][value="succeeded"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="handle"]`), c.handle),
		chromedp.SetValue(chromedp.CSS(`textarea[name="evidence"]`), evidence),
		browser.ClickNavigate("#reconcile-submit"),
		chromedp.WaitVisible(chromedp.CSS("tr.reconciliation")),
		browser.Capture("reconciled"))
	c.wantFits(ctx, "the page of an operation reconciled with 3,000 characters of evidence")
}

// datetime reads the datetime attribute of the <time> element sel.
func (c *consoleRun) datetime(ctx context.Context, sel string) time.Time {
	c.t.Helper()
	v := browserValue(c, ctx, sel, chromedp.AttributeValue(chromedp.CSS(sel), "datetime")).Value
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		c.t.Fatalf("%s: datetime %q: %v", sel, v, err)
	}
	return at
}

// wantFits checks that the page is no wider than the window (1,280 px):
// nothing makes it scroll sideways.
func (c *consoleRun) wantFits(ctx context.Context, what string) {
	c.t.Helper()
	w := browserValue(c, ctx, "the page's width", chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
	if len(w) != 2 || w[0] > 1280 || w[0] > w[1] {
		c.t.Errorf("%s: scrollWidth %v; want at most the window's 1,280 px", what, w)
	}
}
