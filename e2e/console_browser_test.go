package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/internal/browser"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestConsoleBrowser (issue 16, item 3): an operator settles an UNKNOWN
// transfer in the web console of "idem serve --admin-addr", in a real
// headless Chromium, and the client's retry then gets the settled result.
//
// The provider executes the transfer and withholds its answer ("hang",
// as in TestFaultUnknown), the server's call times out and the client
// gets 409 OUTCOME_UNKNOWN; the recovery worker runs only at start
// (--recover-interval 1h), so nothing but the operator settles it. In the
// browser the operator logs in, sees the UNKNOWN count on the status
// page, filters the operations list to UNKNOWN, opens the client's
// operation, asks the provider about its downstream key, and reconciles
// it as succeeded with the provider's handle and written evidence; the
// page then shows SUCCEEDED, the audit entry and the reconciliation (method operator, the
// operator's name, the evidence). Beside the browser, plain HTTP checks
// that a form without its CSRF token is refused (403 CSRF_INVALID,
// nothing changed), that empty evidence is (422 EVIDENCE_REQUIRED), and
// that the API token cannot log in (401). Finally the client's retry of
// its POST replays the settled 201, naming the handle.
//
// The same flow runs with JavaScript on (js), off (nojs: the console must
// work as plain HTML forms and links), and on PostgreSQL (js-postgres).
// A failure saves a screenshot of each page (internal/browser). Before
// settling, right after the lookup answered "executed", the operator
// tries "failed": it is refused (contradictingRefused).
//
// threat:operator-contradicts-lookup threat:weak-evidence
func TestConsoleBrowser(t *testing.T) {
	sqlite := func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "console.db") }
	postgres := func(t *testing.T) string { return pgtest.DSN(t) }
	for _, tc := range []struct {
		name string
		dsn  func(*testing.T) string
		opts []browser.Option
	}{
		{"js", sqlite, nil},
		{"nojs", sqlite, []browser.Option{browser.NoJavaScript()}},
		{"js-postgres", postgres, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var took []string
			lap := func(what string, start time.Time) {
				took = append(took, what+" "+time.Since(start).Round(time.Millisecond).String())
			}
			start := time.Now()
			c := startConsole(t, tc.dsn(t))
			lap("servers", start)
			at := time.Now()
			c.makeUnknown()
			c.httpChecksBefore()
			lap("unknown", at)
			at = time.Now()
			ctx := browser.New(t, tc.opts...)
			lap("browser", at)
			at = time.Now()
			c.operatorSettles(ctx)
			c.clientRetries()
			lap("operator", at)
			lap("total", start)
			t.Log(strings.Join(took, ", "))
		})
	}
}

const (
	consoleOperator = "alice"
	consoleAPIToken = "demo" // idem serve's token without --auth
	consoleStep     = 30 * time.Second
	consoleBody     = `{"amount":"12.50","currency":"EUR","payee":"acct_1"}`
	consoleKey      = "k-console-browser"
)

// consoleRun is one scenario: the provider, "idem serve" with its
// console, the operator's token and what the test learnt on the way.
type consoleRun struct {
	t      *testing.T
	prov   *server
	s      *server           // the API listener
	admin  string            // http://ADDR of the console listener
	token  string            // the operator's token
	others map[string]string // more operators: name → token
	op     string            // the transfer's operation ID (from the client's 409)
	dkey   string            // its downstream key, as the provider recorded it
	handle string            // the provider's id of the transfer it executed
}

// startConsole starts "idem provider" and "idem serve" on dsn with the
// console on a second listener and an operators file naming one
// operator, alice, and the others named (each with a token of its own).
func startConsole(t *testing.T, dsn string, others ...string) *consoleRun {
	t.Helper()
	return startConsoleArgs(t, dsn, nil, others...)
}

// startConsoleArgs is startConsole with more arguments for "idem serve"
// (after the defaults, so a flag given again wins).
func startConsoleArgs(t *testing.T, dsn string, serveArgs []string, others ...string) *consoleRun {
	t.Helper()
	c := &consoleRun{t: t, token: "op-" + rand.Text(), others: map[string]string{}}
	entries := []string{fmt.Sprintf(`%q: {"name": %q, "show_responses": true, "show_tenants": true}`, c.token, consoleOperator)}
	for _, name := range others {
		c.others[name] = "op-" + rand.Text()
		entries = append(entries, fmt.Sprintf(`%q: {"name": %q}`, c.others[name], name))
	}
	ops := filepath.Join(t.TempDir(), "operators.json")
	if err := os.WriteFile(ops, []byte("{"+strings.Join(entries, ", ")+"}"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.prov = startChild(t, nil, "provider", "--addr", "127.0.0.1:0")
	c.s = startServer(t, dsn, append([]string{"--provider", c.prov.url, "--provider-timeout", "1s", "--recover-interval", "1h",
		"--admin-addr", "127.0.0.1:0", "--operators", ops}, serveArgs...)...)
	// Two lines say "listening on", the service's first (TestServeConsole
	// holds the order); wait for both and take each address from its own
	// line.
	awaitLog(t, c.s, `msg="listening on `)
	awaitLog(t, c.s, `msg="console listening on `)
	out := c.s.child.Log()
	api := regexp.MustCompile(`msg="listening on ([^"\s]+)"`).FindStringSubmatch(out)
	admin := regexp.MustCompile(`msg="console listening on ([^"\s]+)"`).FindStringSubmatch(out)
	if api == nil || admin == nil {
		t.Fatalf("idem serve did not log both listeners:\n%s", out)
	}
	c.s.url, c.admin = "http://"+api[1], "http://"+admin[1]
	return c
}

// makeUnknown makes the client's transfer UNKNOWN: the provider executes
// it and hangs until the server's call times out (409 OUTCOME_UNKNOWN).
// The provider keeps hanging new keys for the rest of the test.
func (c *consoleRun) makeUnknown() {
	t := c.t
	if r, err := c.prov.send(http.MethodPost, "/control", "", nil, `{"mode":"hang"}`); err != nil || r.status != http.StatusOK {
		t.Fatalf("provider mode hang: %v %v", r, err)
	}
	first := c.post()
	c.op = first.header.Get("Idempotency-Operation")
	if msg := problemErr(first, http.StatusConflict, "OUTCOME_UNKNOWN"); msg != "" || c.op == "" {
		t.Fatalf("transfer whose provider call timed out: %s %v; want 409 OUTCOME_UNKNOWN naming the operation", msg, first.header)
	}
	// The provider may execute the held request after the 409 arrives.
	var list []struct{ ID, Key string }
	var last string
	await(t, "the provider executes the timed-out transfer", func() bool {
		r, err := c.prov.send(http.MethodGet, "/transfers", "", nil, "")
		last = fmt.Sprint(r, err)
		return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &list) == nil && len(list) == 1
	}, &last)
	c.dkey, c.handle = list[0].Key, list[0].ID
	if st := c.state(); st != "UNKNOWN" {
		t.Fatalf("operation %s is %s after the 409; want UNKNOWN", c.op, st)
	}
}

// post sends the client's transfer.
func (c *consoleRun) post() reply {
	c.t.Helper()
	r, err := c.s.send(http.MethodPost, "/v1/transfers", consoleAPIToken, postHeader(consoleKey), consoleBody)
	if err != nil {
		c.t.Fatalf("POST /v1/transfers: %v", err)
	}
	return r
}

// state returns the operation's state as the API shows it.
func (c *consoleRun) state() string {
	c.t.Helper()
	r := c.s.get(c.t, consoleAPIToken, "/v1/operations/"+c.op)
	var v struct{ State string }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil {
		c.t.Fatalf("GET /v1/operations/%s: %v", c.op, r)
	}
	return v.State
}

// httpChecksBefore: the API token cannot log in to the console.
func (c *consoleRun) httpChecksBefore() {
	r := c.form("/login", nil, url.Values{"token": {consoleAPIToken}})
	c.wantPageError("login with the API token", r, http.StatusUnauthorized, "UNAUTHENTICATED")
}

// form posts a form to the console (path relative to it, or absolute)
// with the cookies given; redirects are not followed.
func (c *consoleRun) form(path string, cookies []*http.Cookie, v url.Values) reply {
	c.t.Helper()
	if !strings.HasPrefix(path, "http") {
		path = c.admin + path
	}
	req, err := http.NewRequest(http.MethodPost, path, strings.NewReader(v.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	client := &http.Client{Timeout: consoleStep, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// wantPageError checks that r is an HTML page with the status and an
// #error element whose data-code is code.
func (c *consoleRun) wantPageError(what string, r reply, status int, code string) {
	c.t.Helper()
	re := regexp.MustCompile(`<[^>]*\bid="error"[^>]*\bdata-code="` + code + `"`)
	if r.status != status || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !re.Match(r.body) {
		c.t.Errorf("%s: got %d %s %.600s; want %d with #error[data-code=%s]", what, r.status, r.header.Get("Content-Type"), r.body, status, code)
	}
}

// clientRetries: the client's retry of its POST, same key and body,
// replays the settled transfer's 201 naming the operator's handle.
func (c *consoleRun) clientRetries() {
	t := c.t
	r := c.post()
	var tr struct {
		ID               string `json:"id"`
		ProviderTransfer string `json:"provider_transfer"`
	}
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Idempotency-Operation") != c.op ||
		json.Unmarshal(r.body, &tr) != nil || tr.ProviderTransfer != c.handle || r.header.Get("Location") != "/v1/transfers/"+tr.ID {
		t.Fatalf("client retry after the operator's settlement: %v %v; want the replayed 201 of %s with provider_transfer %s", r, r.header, c.op, c.handle)
	}
}

// do runs steps in the browser, bounded by consoleStep, failing the test
// with what on error.
func (c *consoleRun) do(ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, consoleStep)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

// browserValue runs one browser action that reads a value, bounded by consoleStep.
func browserValue[T any](c *consoleRun, ctx context.Context, what string, a chromedp.Action[T]) T {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, consoleStep)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// text returns the visible text of the first element matching sel.
func (c *consoleRun) text(ctx context.Context, sel string) string {
	c.t.Helper()
	return strings.TrimSpace(browserValue(c, ctx, "reading "+sel, chromedp.Text(chromedp.CSS(sel))))
}

// wantText checks the text of the first element matching sel.
func (c *consoleRun) wantText(ctx context.Context, sel, want string) {
	c.t.Helper()
	if got := c.text(ctx, sel); got != want {
		c.t.Fatalf("%s shows %q; want %q", sel, got, want)
	}
}

// operatorSettles is the operator's part, in the browser ctx.
func (c *consoleRun) operatorSettles(ctx context.Context) {
	t := c.t
	c.do(ctx, "log in",
		chromedp.Navigate(c.admin+"/login"),
		chromedp.WaitVisible(chromedp.CSS("form#login")),
		browser.Capture("login"),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), c.token),
		browser.ClickNavigate("#login-submit"),
		chromedp.WaitVisible(chromedp.CSS("#unknown-count")),
		browser.Capture("status"))
	c.wantText(ctx, "#operator", consoleOperator)
	if n, err := strconv.Atoi(c.text(ctx, "#unknown-count")); err != nil || n < 1 {
		t.Fatalf("status page: #unknown-count %q; want at least 1", c.text(ctx, "#unknown-count"))
	}
	c.chartsRender(ctx)

	row := `tr.operation[data-id="` + c.op + `"]`
	c.do(ctx, "filter the operations to UNKNOWN",
		browser.ClickNavigate("a#nav-operations"),
		chromedp.WaitVisible(chromedp.CSS("form#filter")),
		chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "UNKNOWN"))
	if v := browserValue(c, ctx, "the state filter", chromedp.Value(chromedp.CSS(`select[name="state"]`))); v != "UNKNOWN" {
		t.Fatalf("state filter set to %q; want UNKNOWN (no such option?)", v)
	}
	c.do(ctx, "the filtered list shows the client's operation",
		browser.ClickNavigate("#filter-submit"),
		chromedp.WaitVisible(chromedp.CSS(row)),
		browser.Capture("operations"))
	if loc := browserValue(c, ctx, "location", chromedp.Location()); !strings.Contains(loc, "state=UNKNOWN") {
		t.Errorf("filtered list at %s; want state=UNKNOWN in the query", loc)
	}
	table := browserValue(c, ctx, "the operations table", chromedp.OuterHTML(chromedp.CSS("table#operations")))
	for _, m := range regexp.MustCompile(`<td class="state">([^<]*)</td>`).FindAllStringSubmatch(table, -1) {
		if m[1] != "UNKNOWN" {
			t.Errorf("the list filtered to UNKNOWN shows a %s operation", m[1])
		}
	}
	c.wantText(ctx, row+" td.state", "UNKNOWN")

	c.do(ctx, "open the operation",
		browser.ClickNavigate(row+" a.operation-link"),
		chromedp.WaitVisible(chromedp.CSS("#operation-id")),
		browser.Capture("operation"))
	c.wantText(ctx, "#operation-id", c.op)
	c.wantText(ctx, "#state", "UNKNOWN")
	c.wantText(ctx, "tr.effect td.downstream-key", c.dkey)

	c.do(ctx, "ask the provider about the downstream key",
		browser.ClickNavigate("form.lookup button.lookup-submit"),
		chromedp.WaitVisible(chromedp.CSS("#lookup-result")),
		browser.Capture("lookup"))
	c.wantText(ctx, "#lookup-result .lookup-handle", c.handle)

	c.forgedForms(ctx)
	c.contradictingRefused(ctx)

	evidence := "lookup: executed as " + c.handle + " (OPS-16)"
	c.do(ctx, "reconcile as succeeded",
		chromedp.Click(chromedp.CSS(`form#reconcile input[name="outcome"][value="succeeded"]`)),
		chromedp.SendKeys(chromedp.CSS(`form#reconcile input[name="handle"]`), c.handle),
		chromedp.SendKeys(chromedp.CSS(`form#reconcile textarea[name="evidence"]`), evidence),
		browser.ClickNavigate("#reconcile-submit"),
		chromedp.WaitVisible(chromedp.CSS("tr.reconciliation")),
		browser.Capture("reconciled"))
	c.wantText(ctx, "#state", "SUCCEEDED")
	c.wantText(ctx, "tr.reconciliation td.method", "operator")
	c.wantText(ctx, "tr.reconciliation td.actor", consoleOperator)
	c.wantText(ctx, "tr.reconciliation td.evidence", evidence)
	// The audit log of the operation: the reconcile entry (who, outcome,
	// evidence), newest, above the lookup's two entries.
	c.wantText(ctx, `table.audit tr.audit-entry:first-child td.action`, "reconcile")
	c.wantText(ctx, `table.audit tr.audit-entry:first-child td.actor`, consoleOperator)
	if d := c.text(ctx, `table.audit tr.audit-entry:first-child td.detail`); !strings.Contains(d, evidence) || !strings.Contains(d, "succeeded") {
		t.Errorf("the reconcile audit entry's detail %q; want the outcome and the evidence", d)
	}
	if f := c.text(ctx, "#flash"); !strings.Contains(f, "SUCCEEDED") {
		t.Errorf("#flash after reconciling: %q; want it to name SUCCEEDED", f)
	}
	// The reconcile committed before its 303: the API shows it at once.
	if st := c.state(); st != "SUCCEEDED" {
		t.Errorf("after the reconcile the API shows %s %s; want SUCCEEDED", c.op, st)
	}

	c.do(ctx, "back to the status page",
		browser.ClickNavigate("a#nav-status"),
		chromedp.WaitVisible(chromedp.CSS("#unknown-count")),
		browser.Capture("status-after"))
	c.wantText(ctx, "#unknown-count", "0")
	c.wantText(ctx, `table.audit tr.audit-entry:first-child td.action`, "reconcile")
}

// contradictingRefused: right after the lookup answered "executed", the
// same operator reconciles "failed" in the browser: evidence that names
// nothing is refused (422 EVIDENCE_TOO_WEAK), and then, with a ticket,
// the decision itself (409 CONTRADICTS_EVIDENCE); the page shows the
// recorded lookup, and the operation stays UNKNOWN with nothing settled
// and no request waiting (TestConsoleBrowser's proof of the threats it
// names).
func (c *consoleRun) contradictingRefused(ctx context.Context) {
	t := c.t
	c.wantText(ctx, `tr.recorded-lookup td.answer`, "executed")
	c.wantText(ctx, `tr.recorded-lookup td.handle`, c.handle)
	c.wantText(ctx, `tr.recorded-lookup td.actor`, consoleOperator)
	for _, step := range []struct{ evidence, code string }{
		{"I believe it failed", "EVIDENCE_TOO_WEAK"},
		{"INC-7: I believe it failed", "CONTRADICTS_EVIDENCE"},
	} {
		c.do(ctx, "reconcile as failed: "+step.evidence,
			chromedp.Navigate(c.admin+"/operations/"+c.op),
			chromedp.WaitVisible(chromedp.CSS("form#reconcile")),
			chromedp.Click(chromedp.CSS(`form#reconcile input[name="outcome"][value="failed"]`)),
			chromedp.SendKeys(chromedp.CSS(`form#reconcile textarea[name="evidence"]`), step.evidence),
			browser.ClickNavigate("#reconcile-submit"),
			chromedp.WaitVisible(chromedp.CSS("#error")),
			browser.Capture("refused-"+strings.ToLower(step.code)))
		code := browserValue(c, ctx, "the error's code", chromedp.AttributeValue(chromedp.CSS("#error"), "data-code")).Value
		if code != step.code {
			t.Fatalf("reconcile failed with %q after an executed lookup: #error %q; want %s", step.evidence, code, step.code)
		}
		c.wantText(ctx, "#state", "UNKNOWN")
		if st := c.state(); st != "UNKNOWN" {
			t.Fatalf("after the refused decision the API shows %s; want UNKNOWN", st)
		}
	}
	if strings.Contains(browserValue(c, ctx, "the page", chromedp.OuterHTML(chromedp.CSS("body"))), `id="pending"`) {
		t.Errorf("a refused decision left a settlement request")
	}
	c.do(ctx, "back to the operation", chromedp.Navigate(c.admin+"/operations/"+c.op), chromedp.WaitVisible(chromedp.CSS("form#reconcile")))
}

// chartsRender: the status page's charts are drawn under the console's
// Content-Security-Policy: the "UNKNOWN by age" SVG and its "< 1 min"
// bar (the client's operation, just made UNKNOWN) have a rendered size,
// and so has the acceptance latency chart (idem serve passes its metrics
// registry). Sizes come from the DOM's box model, which needs no script.
func (c *consoleRun) chartsRender(ctx context.Context) {
	c.do(ctx, "the status page's charts", chromedp.WaitVisible(chromedp.CSS("#unknown-ages svg")))
	for _, sel := range []string{"#unknown-ages svg", "#unknown-ages rect.bar", "#acceptance-latency svg", "#acceptance-latency rect.bar"} {
		box := browserValue(c, ctx, "the size of "+sel, chromedp.Dimensions(chromedp.CSS(sel)))
		if box == nil || box.Width <= 0 || box.Height <= 0 {
			c.t.Errorf("%s is drawn %+v; want a non-zero size", sel, box)
		}
	}
}

// forgedForms posts the reconcile form over plain HTTP with the browser's
// session cookie: without the CSRF token (403 CSRF_INVALID, the operation
// stays UNKNOWN) and with it but empty evidence (422 EVIDENCE_REQUIRED).
func (c *consoleRun) forgedForms(ctx context.Context) {
	t := c.t
	cookies := browserValue(c, ctx, "the browser's cookies", func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		r, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{c.admin + "/"}})
		return r.Cookies, err
	})
	if len(cookies) == 0 {
		t.Fatal("the browser holds no console cookie after logging in")
	}
	var jar []*http.Cookie
	for _, ck := range cookies {
		jar = append(jar, &http.Cookie{Name: ck.Name, Value: ck.Value})
	}
	action := browserValue(c, ctx, "the reconcile form's action", chromedp.JavascriptAttribute[string](chromedp.CSS("form#reconcile"), "action"))
	csrf := browserValue(c, ctx, "the reconcile form's CSRF token", chromedp.Value(chromedp.CSS(`form#reconcile input[name="csrf"]`)))
	v := url.Values{"outcome": {"succeeded"}, "handle": {c.handle}, "evidence": {"forged, see " + c.handle}}

	c.wantPageError("reconcile without the CSRF token", c.form(action, jar, v), http.StatusForbidden, "CSRF_INVALID")
	if st := c.state(); st != "UNKNOWN" {
		t.Fatalf("after a reconcile without the CSRF token the operation is %s; want UNKNOWN", st)
	}
	v.Set("csrf", csrf)
	v.Set("evidence", "")
	c.wantPageError("reconcile without evidence", c.form(action, jar, v), http.StatusUnprocessableEntity, "EVIDENCE_REQUIRED")
	if st := c.state(); st != "UNKNOWN" {
		t.Fatalf("after a reconcile without evidence the operation is %s; want UNKNOWN", st)
	}
}
