package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// auditRowRe matches one row of an audit table: action, actor, detail.
var auditRowRe = regexp.MustCompile(`<tr class="audit-entry" data-action="([^"]+)"><td class="at">[^<]*</td><td class="actor">([^<]*)</td><td class="action">[^<]*</td><td class="operation">(?:<code><bdi class="id">[^<]*</bdi></code>)?</td><td class="detail">([^<]*)</td></tr>`)

// auditRows returns the "action actor" of every audit row of a page, in
// page order.
func auditRows(body string) []string {
	var rows []string
	for _, m := range auditRowRe.FindAllStringSubmatch(body, -1) {
		rows = append(rows, m[1]+" "+m[2])
	}
	return rows
}

// actions reads the audit log (of one operation when id is set), newest
// first, as "action actor" strings, and the entries themselves.
func (e *env) actions(id string) ([]string, []registry.AuditEntry) {
	e.t.Helper()
	log, err := e.store.AuditLog(e.t.Context(), registry.AuditFilter{OperationID: id, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, a := range log {
		out = append(out, a.Action+" "+a.Actor)
	}
	return out, log
}

// TestAuditTrail: every action an operator takes in the console is in the
// registry's audit log with the operator's name, newest first — login,
// lookup (what was asked and what was answered), reconcile (outcome and
// evidence), drain, epoch bump, logout — and the status and operation
// pages show it; refused forms write nothing.
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{Kind: effect.Executed, Handle: "tr_77", Detail: "found by key"}, func(t *testing.T, e *env) {
		rec := e.unknown()
		id := rec.OperationID
		detail := "/admin/operations/" + id
		c, csrf := e.login(aliceToken)
		if got, _ := e.actions(""); strings.Join(got, ",") != "login alice" {
			t.Fatalf("after login the log is %v, want [login alice]", got)
		}

		if code, _, _ := e.do(c, detail+"/effects/transfer/lookup", url.Values{"csrf": {csrf}}); code != http.StatusSeeOther {
			t.Fatalf("lookup: %d", code)
		}
		// Refused forms (no evidence; no CSRF token; no confirmation)
		// write no entry.
		e.do(c, detail+"/reconcile", url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "evidence": {"  "}})
		e.do(c, detail+"/reconcile", url.Values{"outcome": {"succeeded"}, "evidence": {"no token"}})
		e.do(c, "/admin/drain/on", url.Values{"csrf": {csrf}})
		evidence := "Provider support ticket 4411: transfer tr_77 executed at 10:02"
		if code, _, body := e.do(c, detail+"/reconcile", url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "handle": {"tr_77"}, "evidence": {evidence}}); code != http.StatusSeeOther {
			t.Fatalf("reconcile: %d %s", code, body)
		}
		for _, path := range []string{"/admin/drain/on", "/admin/epoch/bump", "/admin/drain/off"} {
			if code, _, body := e.do(c, path, url.Values{"csrf": {csrf}, "confirm": {"yes"}, "epoch": {"0"}}); code != http.StatusSeeOther {
				t.Fatalf("%s: %d %s", path, code, body)
			}
		}

		want := []string{"drain.off alice", "epoch.bump alice", "drain.on alice", "reconcile alice", "lookup alice", "lookup alice", "login alice"}
		got, log := e.actions("")
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("audit log %v, want %v", got, want)
		}
		if d := log[3].Detail; log[3].OperationID != id || !strings.Contains(d, "succeeded") || !strings.Contains(d, "tr_77") || !strings.Contains(d, evidence) {
			t.Errorf("reconcile entry %+v: want the operation, outcome, handle and evidence", log[3])
		}
		if ask, answer := log[5], log[4]; ask.OperationID != id || !strings.Contains(ask.Detail, registry.DownstreamKey(id, "transfer")) ||
			!strings.Contains(answer.Detail, "executed") || !strings.Contains(answer.Detail, "tr_77") {
			t.Errorf("lookup entries %+v then %+v: want the key asked, then the answer with its handle", ask, answer)
		}
		if !strings.Contains(log[1].Detail, "epoch 0") {
			t.Errorf("epoch bump entry %+v: want the epoch the page showed", log[1])
		}
		for i := 1; i < len(log); i++ {
			if log[i].At.After(log[i-1].At) || log[i].Seq >= log[i-1].Seq {
				t.Errorf("entry %d (%v, seq %d) is not older than entry %d (%v, seq %d)", i, log[i].At, log[i].Seq, i-1, log[i-1].At, log[i-1].Seq)
			}
		}

		_, _, status := e.do(c, "/admin/", nil)
		if rows := auditRows(status); strings.Join(rows, ",") != strings.Join(want, ",") {
			t.Errorf("status page's audit table %v, want %v", rows, want)
		}
		_, _, page := e.do(c, detail, nil)
		if rows := auditRows(page); strings.Join(rows, ",") != "reconcile alice,lookup alice,lookup alice" {
			t.Errorf("operation page's audit table %v, want the reconcile and the two lookup entries", rows)
		}
		if !strings.Contains(page, evidence) {
			t.Error("operation page does not show the evidence")
		}

		// Another operator's session writes under their name.
		b, bcsrf := e.login(bobToken)
		e.do(b, "/admin/logout", url.Values{"csrf": {bcsrf}})
		if got, _ := e.actions(""); strings.Join(got[:2], ",") != "logout bob,login bob" {
			t.Errorf("newest entries %v, want [logout bob login bob]", got[:2])
		}
	})
}

// TestAuditWriteAhead: when the audit log cannot be written (the database
// refuses the insert), no action is taken — no login, drain, epoch bump,
// lookup or reconciliation — and the console answers 503
// STORE_UNAVAILABLE.
func TestAuditWriteAhead(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{Kind: effect.Executed, Handle: "tr_1"}, func(t *testing.T, e *env) {
		rec := e.unknown()
		c, csrf := e.login(aliceToken)
		refuseAuditInserts(t, e.store)

		for _, path := range []string{"/admin/drain/on", "/admin/epoch/bump", "/admin/operations/" + rec.OperationID + "/effects/transfer/lookup"} {
			if code, _, body := e.do(c, path, url.Values{"csrf": {csrf}, "confirm": {"yes"}}); code != http.StatusServiceUnavailable || errorCode(body) != "STORE_UNAVAILABLE" {
				t.Errorf("%s with the audit log refusing: %d %q, want 503 STORE_UNAVAILABLE", path, code, errorCode(body))
			}
		}
		ctl, err := e.store.Control(t.Context())
		if err != nil || ctl.Draining || ctl.WriterEpoch != 0 {
			t.Errorf("control row %+v (%v): want drain off and epoch 0", ctl, err)
		}
		code, _, body := e.do(c, "/admin/operations/"+rec.OperationID+"/reconcile",
			url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "evidence": {"ticket INC-1"}})
		if code != http.StatusServiceUnavailable || errorCode(body) != "STORE_UNAVAILABLE" {
			t.Errorf("reconcile with the audit log refusing: %d %q, want 503", code, errorCode(body))
		}
		if st := e.state(rec.OperationID); st != idem.StateUnknown {
			t.Errorf("reconcile changed the operation to %s without its audit entry", st)
		}
		if log, err := e.store.Reconciliations(t.Context(), rec.OperationID); err != nil || len(log) != 0 {
			t.Errorf("reconciliation log %v (%v), want empty", log, err)
		}
		nc := e.client()
		if code, _, body := e.do(nc, "/admin/login", url.Values{"token": {bobToken}}); code != http.StatusServiceUnavailable || strings.Contains(body, `id="operator"`) {
			t.Errorf("login with the audit log refusing: %d, or the page shows an operator logged in; want 503 and none", code)
		}
		if code, loc, _ := e.do(nc, "/admin/", nil); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/login") {
			t.Errorf("after a refused login the console answered %d %q, want 303 to the login page", code, loc)
		}
	})
}

// refuseAuditInserts makes the database refuse every insert into
// idem_audit from now on.
func refuseAuditInserts(t *testing.T, store registry.Store) {
	t.Helper()
	stmts := []string{`CREATE TRIGGER test_refuse_audit BEFORE INSERT ON idem_audit BEGIN SELECT RAISE(ABORT, 'test: audit refused'); END`}
	if isPostgres(t, store) {
		stmts = []string{
			`CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'test: audit refused'; END $$`,
			`CREATE TRIGGER test_refuse_audit BEFORE INSERT ON idem_audit FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()`,
		}
	}
	for _, q := range stmts {
		if err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
			_, err := tx.Exec(ctx, q)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// isPostgres reports whether store is on PostgreSQL.
func isPostgres(t *testing.T, store registry.Store) bool {
	var v string
	err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT version()`).Scan(&v)
	})
	return err == nil && strings.HasPrefix(v, "PostgreSQL")
}

// TestOperationOutbox: the operation page lists the outbox messages its
// outcome wrote with their delivery state — published, dead with its
// error, pending — and never their payload.
func TestOperationOutbox(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		ctx := t.Context()
		c := registry.Claim{Operation: "tests.orders"}
		c.Scope[0], c.Fingerprint[0] = 1, 2
		rec, _, err := e.store.Reserve(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		out := registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{}`)}}
		for _, topic := range []string{"orders.created", "orders.audit", "orders.billing"} {
			out.Outbox = append(out.Outbox, registry.Message{Topic: topic, Payload: []byte(`{"card":"payload-secret-5512"}`)})
		}
		if _, err := e.store.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return out, nil }); err != nil {
			t.Fatal(err)
		}
		ids := []string{registry.MessageID(rec.OperationID, 0), registry.MessageID(rec.OperationID, 1), registry.MessageID(rec.OperationID, 2)}
		if err := e.store.MarkPublished(ctx, ids[:1]); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.ClaimOutbox(ctx, 10, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := e.store.FailOutbox(ctx, registry.OutboxFailure{ID: ids[1], Error: "receiver said 410 Gone", Dead: true}); err != nil {
			t.Fatal(err)
		}

		cl, _ := e.login(bobToken)
		code, _, body := e.do(cl, "/admin/operations/"+rec.OperationID, nil)
		if code != http.StatusOK {
			t.Fatalf("operation page: %d", code)
		}
		rows := regexp.MustCompile(`<tr class="outbox-message" data-state="([a-z]+)"><td class="message-id"><code><bdi class="id">([^<]+)</bdi></code></td><td class="topic">([^<]+)</td>.*?<td class="last-error">([^<]*)</td></tr>`).FindAllStringSubmatch(body, -1)
		want := [][]string{{"published", ids[0], "orders.created", ""}, {"dead", ids[1], "orders.audit", "receiver said 410 Gone"}, {"pending", ids[2], "orders.billing", ""}}
		if len(rows) != len(want) {
			t.Fatalf("outbox rows %v, want %v", rows, want)
		}
		for i, r := range rows {
			if strings.Join(r[1:], "|") != strings.Join(want[i], "|") {
				t.Errorf("outbox row %d: %v, want %v", i, r[1:], want[i])
			}
		}
		if strings.Contains(body, "payload-secret-5512") {
			t.Error("the operation page shows an outbox payload")
		}
	})
}

// TestStatusPruneRuns: the status page lists the recorded prune runs,
// newest first, a failed one with its error.
func TestStatusPruneRuns(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		c, _ := e.login(aliceToken)
		if _, _, body := e.do(c, "/admin/", nil); !strings.Contains(body, "No prune run is recorded") {
			t.Errorf("status page without prune runs: no sentence saying so")
		}
		now := time.Now()
		if err := e.store.RecordPruneRun(t.Context(), registry.PruneRun{Actor: "maintenance on host-a pid 1", StartedAt: now.Add(-time.Minute),
			FinishedAt: now.Add(-time.Minute + 40*time.Millisecond), Error: "registry: prune: store unavailable"}); err != nil {
			t.Fatal(err)
		}
		if _, err := registry.PruneAllRecorded(t.Context(), e.store, 0, "idem prune"); err != nil {
			t.Fatal(err)
		}
		_, _, body := e.do(c, "/admin/", nil)
		runs := regexp.MustCompile(`<tr class="prune-run( failed)?"><td class="at">[^<]+</td><td class="actor">([^<]+)</td>.*?<td class="error">([^<]*)</td></tr>`).FindAllStringSubmatch(body, -1)
		if len(runs) != 2 || runs[0][2] != "idem prune" || runs[0][1] != "" || runs[1][2] != "maintenance on host-a pid 1" || runs[1][1] != " failed" || runs[1][3] != "registry: prune: store unavailable" {
			t.Errorf("prune runs on the status page: %q", runs)
		}
	})
}
