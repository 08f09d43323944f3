package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/registry"
)

// TestOnCallPage: without a relay (Config.NoRelay) the status page says
// "no relay configured" and shows no lag; with one, the lag. An UNKNOWN
// operation's page shows the recovery worker's recorded attempt (last
// error, next attempt); its tenant is named to an operator allowed to
// see it — bob is not: he sees the hash and why; a form over 64 KiB is
// 413 FORM_TOO_LARGE naming the limit, the operation unchanged.
//
// threat:unknown-without-reason
func TestOnCallPage(t *testing.T) {
	t.Parallel()
	store, err := idemsqlite.OpenMemory(t.Context(), idemsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e := newEnv(t, store, effect.Answer{Kind: effect.Indefinite, Detail: "connection refused"}, func(c *console.Config) {
		c.NoRelay, c.Tenants = true, []string{"acme", "globex"}
	})
	c, csrf := e.login(bobToken)
	_, _, body := e.do(c, "/admin/", nil)
	if !strings.Contains(body, `id="relay-none"`) || strings.Contains(body, `id="relay-lag"`) {
		t.Errorf("status page without a relay: relay-none %v, relay-lag %v; want no relay configured, no lag",
			strings.Contains(body, `id="relay-none"`), strings.Contains(body, `id="relay-lag"`))
	}
	with := newEnv(t, store, effect.Answer{})
	wc, _ := with.login(bobToken)
	if _, _, body := with.do(wc, "/admin/", nil); strings.Contains(body, `id="relay-none"`) || !strings.Contains(body, `id="relay-lag"`) {
		t.Errorf("status page with a relay does not show its lag")
	}

	ctx := t.Context()
	cl := registry.Claim{Operation: opKind, Tenant: "acme"}
	cl.Scope[0], cl.Fingerprint[0] = 9, 9
	rec, _, err := store.Reserve(ctx, cl)
	if err == nil {
		if _, err = store.BeginEffect(ctx, rec, "transfer", nil); err == nil {
			rec, err = store.MarkUnknown(ctx, rec)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	page := "/admin/operations/" + rec.OperationID
	if _, _, body := e.do(c, page, nil); !strings.Contains(body, `id="no-attempt"`) {
		t.Errorf("an UNKNOWN operation without attempts does not say so")
	}
	next := time.Now().Add(4*time.Minute + 30*time.Second)
	if _, err := registry.RecordRecoveryAttempt(ctx, store, rec.OperationID, "GET /transfers/k: connection refused", time.Now(), next); err != nil {
		t.Fatal(err)
	}
	_, _, body = e.do(c, page, nil)
	for _, want := range []string{`<td id="last-error">GET /transfers/k: connection refused</td>`,
		`<td id="next-attempt"><time datetime="` + next.UTC().Format(time.RFC3339) + `" data-when="future">`, `(in 4m)`, `<td id="attempts">1</td>`,
		`id="tenant-hash"`, "may not see tenant names"} {
		if !strings.Contains(body, want) {
			t.Errorf("bob's page of the UNKNOWN operation lacks %q", want)
		}
	}
	if strings.Contains(body, "acme") {
		t.Errorf("bob, without show_tenants, is shown the tenant's name")
	}

	code, _, body := e.do(c, page+"/reconcile", url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "evidence": {"OPS-1 " + strings.Repeat("x", 70<<10)}})
	if code != http.StatusRequestEntityTooLarge || errorCode(body) != console.CodeFormTooLarge || !strings.Contains(body, "64 KiB") {
		t.Errorf("evidence over 64 KiB: %d %q; want 413 FORM_TOO_LARGE naming 64 KiB", code, errorCode(body))
	}
	if e.state(rec.OperationID) != idem.StateUnknown {
		t.Errorf("a form over the limit changed the operation")
	}
}
