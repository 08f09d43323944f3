package e2e

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestConsoleEvidenceBinds (issue 22): against "idem serve" with its
// console and "idem provider", as real processes, on both drivers, over
// plain HTTP (the console works without JavaScript) and with "idem ops":
//
//   - a transfer the provider executed while the server's call timed out
//     (UNKNOWN): alice asks the downstream in the console ("executed"),
//     then reconciles "failed" — 409 CONTRADICTS_EVIDENCE; "idem ops
//     lookup" records its own "executed" and "idem ops reconcile --outcome
//     failed" exits 1 with CONTRADICTS_EVIDENCE; the operation stays
//     UNKNOWN;
//   - a transfer the provider never executed (it answered 503): the
//     lookup finds nothing, alice's "failed" is stored as a request and
//     the operation stays UNKNOWN; alice cannot approve it (409
//     SELF_APPROVAL); bob approves it in the console and only then is it
//     FAILED_FINAL, and the client's retry replays 422 TRANSFER_DECLINED.
//
// threat:operator-contradicts-lookup threat:one-operator-failed
func TestConsoleEvidenceBinds(t *testing.T) {
	pgtest.EachDriver(t, "evidence.db", func(t *testing.T, _, dsn string) {
		c := startConsole(t, dsn, "bob")
		c.makeUnknown()
		alice := c.login(c.token)
		page := "/operations/" + c.op
		csrf := c.csrf(alice, page)
		if r := c.form(page+"/effects/provider.transfer/lookup", alice, url.Values{"csrf": {csrf}}); r.status != http.StatusSeeOther {
			t.Fatalf("lookup in the console: %v", r)
		}
		if body := c.page(alice, page); !strings.Contains(body, `<tr class="recorded-lookup" data-answer="executed">`) || !strings.Contains(body, c.handle) {
			t.Fatalf("the operation page does not show the recorded executed lookup: %s", body)
		}
		r := c.form(page+"/reconcile", alice, url.Values{"csrf": {csrf}, "outcome": {"failed"}, "evidence": {"INC-7: I believe it failed"}})
		c.wantPageError("failed after the executed lookup", r, http.StatusConflict, "CONTRADICTS_EVIDENCE")
		out, err := exec.Command(idemBin, "ops", "lookup", c.op, "--provider", c.prov.url, "--actor", "carol", "--db", dsn).CombinedOutput()
		if err != nil || !strings.Contains(string(out), ": executed, handle "+c.handle) {
			t.Fatalf("idem ops lookup: %v\n%s", err, out)
		}
		out, err = exec.Command(idemBin, "ops", "reconcile", c.op, "--outcome", "failed", "--evidence", "INC-7: I believe it failed", "--actor", "carol", "--db", dsn).CombinedOutput()
		if code := exitCode(err); code != 1 || !strings.Contains(string(out), "CONTRADICTS_EVIDENCE") {
			t.Fatalf("idem ops reconcile --outcome failed after the lookups: exit %d\n%s", code, out)
		}
		if st := c.state(); st != "UNKNOWN" {
			t.Fatalf("after the refused decisions the operation is %s; want UNKNOWN", st)
		}
		if body := c.page(alice, page); strings.Contains(body, `id="pending"`) || strings.Count(body, `class="recorded-lookup"`) != 2 {
			t.Errorf("after the refusals: want two recorded lookups and no request: %s", body)
		}

		// A transfer the provider never executed: it answers 503.
		if r, err := c.prov.send(http.MethodPost, "/control", "", nil, `{"mode":"fail"}`); err != nil || r.status != http.StatusOK {
			t.Fatalf("provider mode fail: %v %v", r, err)
		}
		const key = "k-console-evidence-2"
		first, err := c.s.send(http.MethodPost, "/v1/transfers", consoleAPIToken, postHeader(key), consoleBody)
		c.op = first.header.Get("Idempotency-Operation")
		if msg := problemErr(first, http.StatusConflict, "OUTCOME_UNKNOWN"); err != nil || msg != "" || c.op == "" {
			t.Fatalf("transfer the provider failed: %v %s; want 409 OUTCOME_UNKNOWN", err, msg)
		}
		page = "/operations/" + c.op
		if r := c.form(page+"/effects/provider.transfer/lookup", alice, url.Values{"csrf": {csrf}}); r.status != http.StatusSeeOther {
			t.Fatalf("lookup of the failed transfer: %v", r)
		}
		r = c.form(page+"/reconcile", alice, url.Values{"csrf": {csrf}, "outcome": {"failed"}, "evidence": {"OPS-12: provider support found no transfer"}})
		if r.status != http.StatusSeeOther {
			t.Fatalf("failed without a definite answer: %v", r)
		}
		if st := c.state(); st != "UNKNOWN" {
			t.Fatalf("one operator's request settled the operation: %s", st)
		}
		c.wantPageError("approval by the requester", c.form(page+"/approve", alice, url.Values{"csrf": {csrf}}), http.StatusConflict, "SELF_APPROVAL")
		bob := c.login(c.others["bob"])
		if body := c.page(bob, page); !strings.Contains(body, `<div id="pending" data-approved="no">`) || !strings.Contains(body, `<form id="approve"`) {
			t.Fatalf("bob's page lacks the request or the approve form: %s", body)
		}
		if r := c.form(page+"/approve", bob, url.Values{"csrf": {c.csrf(bob, page)}}); r.status != http.StatusSeeOther {
			t.Fatalf("approval by bob: %v", r)
		}
		if st := c.state(); st != "FAILED_FINAL" {
			t.Fatalf("after bob's approval the operation is %s; want FAILED_FINAL", st)
		}
		retry, err := c.s.send(http.MethodPost, "/v1/transfers", consoleAPIToken, postHeader(key), consoleBody)
		if msg := problemErr(retry, http.StatusUnprocessableEntity, "TRANSFER_DECLINED"); err != nil || msg != "" {
			t.Errorf("the client's retry: %v %s; want the settled 422 TRANSFER_DECLINED", err, msg)
		}
	})
}

// login logs in to the console with token and returns the session's
// cookies.
func (c *consoleRun) login(token string) []*http.Cookie {
	c.t.Helper()
	r := c.form("/login", nil, url.Values{"token": {token}})
	cookies := (&http.Response{Header: r.header}).Cookies()
	if r.status != http.StatusSeeOther || len(cookies) == 0 {
		c.t.Fatalf("console login: %v", r)
	}
	return cookies
}

// page GETs a console page with cookies and returns its body.
func (c *consoleRun) page(cookies []*http.Cookie, path string) string {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.admin+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	resp, err := (&http.Client{Timeout: consoleStep}).Do(req)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the forms on a console page.
func (c *consoleRun) csrf(cookies []*http.Cookie, path string) string {
	c.t.Helper()
	m := csrfField.FindStringSubmatch(c.page(cookies, path))
	if m == nil {
		c.t.Fatalf("no CSRF token on %s", path)
	}
	return m[1]
}

// exitCode is the exit code of a finished command's error (0 for nil).
func exitCode(err error) int {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
