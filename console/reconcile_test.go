package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// TestReconcile: an UNKNOWN operation is listed and shown (hashes, never
// the request); the reconcile form is refused without CSRF token,
// evidence or outcome, nothing changed; with both it settles the
// operation through effect.Set.SettleByOperator, logged with method
// operator and the operator's name; a second one is 409 NOT_UNKNOWN.
func TestReconcile(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{Kind: effect.Executed, Handle: "tr_42", Detail: "GET /transfers/by-key answered 200"}, func(t *testing.T, e *env) {
		rec := e.unknown()
		id := rec.OperationID
		c, csrf := e.login(aliceToken)

		code, _, body := e.do(c, "/admin/operations?state=UNKNOWN", nil)
		if code != http.StatusOK || !strings.Contains(body, `<tr class="operation" data-id="`+id+`">`) ||
			!strings.Contains(body, `<td class="state">UNKNOWN</td>`) || !strings.Contains(body, `<a class="operation-link" href="/admin/operations/`+id+`">`) {
			t.Fatalf("list: %d %s", code, body)
		}
		if _, _, body := e.do(c, "/admin/operations?state=SUCCEEDED", nil); strings.Contains(body, id) {
			t.Errorf("SUCCEEDED list shows the UNKNOWN operation")
		}
		if _, _, body := e.do(c, "/admin/operations?state=nope", nil); errorCode(body) != "INVALID" {
			t.Errorf("unknown state: %q", errorCode(body))
		}
		detail := "/admin/operations/" + id
		code, _, body = e.do(c, detail, nil)
		for _, want := range []string{`id="operation-id"><bdi class="id">` + id + `<`, `id="state">UNKNOWN<`, `<form id="reconcile"`, `class="effect-name">transfer<`,
			`class="downstream-key"><code><bdi class="id">` + registry.DownstreamKey(id, "transfer") + `<`, rec.Scope.String(), rec.Fingerprint.String(), `class="lookup"`} {
			if !strings.Contains(body, want) {
				t.Errorf("detail page lacks %q", want)
			}
		}
		if code != http.StatusOK || strings.Contains(body, "request-payload-7731") {
			t.Errorf("detail: %d, or it shows the request payload", code)
		}
		if code, _, body := e.do(c, "/admin/operations/op_00000000000000000000000000", nil); code != http.StatusNotFound || errorCode(body) != "NOT_FOUND" {
			t.Errorf("missing operation: %d %q", code, errorCode(body))
		}

		// The lookup changes nothing and shows the downstream's answer.
		code, loc, _ := e.do(c, detail+"/effects/transfer/lookup", url.Values{"csrf": {csrf}})
		if code != http.StatusSeeOther || !strings.HasPrefix(loc, detail+"?") {
			t.Fatalf("lookup: %d %q", code, loc)
		}
		if _, _, body := e.do(c, loc, nil); !strings.Contains(body, `id="lookup-result" data-kind="executed"`) || !strings.Contains(body, "tr_42") {
			t.Errorf("lookup result not shown: %s", body)
		}
		if e.state(id) != idem.StateUnknown {
			t.Fatalf("the lookup changed the operation")
		}

		reconcile := detail + "/reconcile"
		for _, tc := range []struct {
			name   string
			form   url.Values
			status int
			code   string
		}{
			{"no csrf", url.Values{"outcome": {"succeeded"}, "evidence": {"INC-1: see the ticket"}}, http.StatusForbidden, "CSRF_INVALID"},
			{"wrong csrf", url.Values{"csrf": {csrf + "x"}, "outcome": {"succeeded"}, "evidence": {"INC-1: see the ticket"}}, http.StatusForbidden, "CSRF_INVALID"},
			{"no evidence", url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "handle": {"tr_typed"}, "evidence": {"  \n "}}, http.StatusUnprocessableEntity, "EVIDENCE_REQUIRED"},
			{"no outcome", url.Values{"csrf": {csrf}, "evidence": {"INC-1: see the ticket"}}, http.StatusUnprocessableEntity, "OUTCOME_REQUIRED"},
			{"bad outcome", url.Values{"csrf": {csrf}, "outcome": {"maybe"}, "evidence": {"INC-1: see the ticket"}}, http.StatusUnprocessableEntity, "OUTCOME_REQUIRED"},
			{"handle with failed", url.Values{"csrf": {csrf}, "outcome": {"failed"}, "handle": {"tr_1"}, "evidence": {"INC-1: see the ticket"}}, http.StatusUnprocessableEntity, "INVALID"},
		} {
			code, _, body := e.do(c, reconcile, tc.form)
			if code != tc.status || errorCode(body) != tc.code {
				t.Errorf("%s: %d %q; want %d %s", tc.name, code, errorCode(body), tc.status, tc.code)
			}
			if tc.code == "EVIDENCE_REQUIRED" && (!strings.Contains(body, `<form id="reconcile"`) || !strings.Contains(body, `value="tr_typed"`) ||
				!strings.Contains(body, `value="succeeded" checked`)) {
				t.Errorf("%s: the form is not shown again with what was typed: %s", tc.name, body)
			}
			if st := e.state(id); st != idem.StateUnknown {
				t.Fatalf("%s changed the operation to %s", tc.name, st)
			}
		}

		code, loc, _ = e.do(c, reconcile, url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "handle": {"tr_42"}, "evidence": {" INC-9: provider shows tr_42 executed "}})
		if code != http.StatusSeeOther || !strings.HasPrefix(loc, detail+"?flash=") {
			t.Fatalf("reconcile: %d %q", code, loc)
		}
		if st := e.state(id); st != idem.StateSucceeded {
			t.Fatalf("after reconcile: %s", st)
		}
		log, err := e.store.Reconciliations(context.Background(), id)
		if err != nil || len(log) != 1 || log[0].Method != registry.ReconcileOperator || log[0].Actor != "alice" ||
			log[0].Evidence != "INC-9: provider shows tr_42 executed" {
			t.Fatalf("reconciliation log: %+v %v", log, err)
		}
		_, _, body = e.do(c, loc, nil)
		for _, want := range []string{`id="flash"`, `id="state">SUCCEEDED<`, `<td class="method">operator</td><td class="actor">alice</td>`, `id="response-status">201<`} {
			if !strings.Contains(body, want) {
				t.Errorf("detail after reconcile lacks %q", want)
			}
		}
		if strings.Contains(body, `<form id="reconcile"`) {
			t.Errorf("the reconcile form is shown for a SUCCEEDED operation")
		}
		if code, _, body := e.do(c, reconcile, url.Values{"csrf": {csrf}, "outcome": {"failed"}, "evidence": {"again, see INC-2"}}); code != http.StatusConflict || errorCode(body) != "NOT_UNKNOWN" {
			t.Errorf("second reconcile: %d %q", code, errorCode(body))
		}
		if log, _ := e.store.Reconciliations(context.Background(), id); len(log) != 1 {
			t.Errorf("second reconcile wrote: %+v", log)
		}
	})
}

// TestLookupFailed: a lookup whose answer proves nothing ends, as every
// lookup, in a 303 to the operation's page (POST-redirect-GET), which
// shows it as LOOKUP_FAILED; it changes nothing; an operation kind without effects
// has neither lookup nor reconcile form, and says why.
func TestLookupFailed(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{Kind: effect.Indefinite, Detail: "answered 503"}, func(t *testing.T, e *env) {
		rec := e.unknown()
		c, csrf := e.login(bobToken)
		code, loc, _ := e.do(c, "/admin/operations/"+rec.OperationID+"/effects/transfer/lookup", url.Values{"csrf": {csrf}})
		if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/operations/"+rec.OperationID+"?") {
			t.Fatalf("lookup: %d to %q, want 303 to the operation's page (POST-redirect-GET)", code, loc)
		}
		if code, _, body := e.do(c, loc, nil); code != http.StatusOK || errorCode(body) != "LOOKUP_FAILED" || !strings.Contains(body, "answered 503") {
			t.Errorf("the page the lookup redirected to: %d %q", code, errorCode(body))
		}
		if e.state(rec.OperationID) != idem.StateUnknown {
			t.Errorf("lookup changed the operation")
		}
		if code, _, body := e.do(c, "/admin/operations/"+rec.OperationID+"/effects/nope/lookup", url.Values{"csrf": {csrf}}); code != http.StatusNotFound || errorCode(body) != "NOT_FOUND" {
			t.Errorf("lookup of an unknown effect: %d %q", code, errorCode(body))
		}

		ctx := t.Context()
		other := registry.Claim{Operation: "other.kind"}
		other.Scope[0], other.Fingerprint[0] = 7, 7
		o, _, err := e.store.Reserve(ctx, other)
		if err == nil {
			if _, err = e.store.BeginEffect(ctx, o, "x", nil); err == nil {
				_, err = e.store.MarkUnknown(ctx, o)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _, body := e.do(c, "/admin/operations/"+o.OperationID, nil)
		if strings.Contains(body, `<form id="reconcile"`) || strings.Contains(body, `class="lookup"`) || !strings.Contains(body, `id="why-not"`) {
			t.Errorf("operation without effects: %s", body)
		}
		if code, _, body := e.do(c, "/admin/operations/"+o.OperationID+"/reconcile", url.Values{"csrf": {csrf}, "outcome": {"failed"}, "evidence": {"INC-3: no transfer"}}); code != http.StatusConflict || errorCode(body) != "NOT_SETTLEABLE" {
			t.Errorf("reconcile of an operation without effects: %d %q", code, errorCode(body))
		}
	})
}

// TestReconcileContradictsEvidence: when the downstream already gave a
// result for the operation's effect (stored with it, the record still
// UNKNOWN), an operator's decision against it is refused — 409
// CONTRADICTS_EVIDENCE, nothing changed, the refusal in the audit log —
// and one that agrees with it settles the operation.
func TestReconcileContradictsEvidence(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		rec := e.unknown()
		if err := e.store.RecordEffect(t.Context(), rec, "transfer", "tr_55", registry.EffectSucceeded, nil); err != nil {
			t.Fatal(err)
		}
		c, csrf := e.login(aliceToken)
		path := "/admin/operations/" + rec.OperationID + "/reconcile"
		code, _, body := e.do(c, path, url.Values{"csrf": {csrf}, "outcome": {"failed"}, "evidence": {"INC-4: I think it failed"}})
		if code != http.StatusConflict || errorCode(body) != "CONTRADICTS_EVIDENCE" {
			t.Fatalf("a decision against the downstream's result: %d %q; want 409 CONTRADICTS_EVIDENCE", code, errorCode(body))
		}
		if st := e.state(rec.OperationID); st != idem.StateUnknown {
			t.Fatalf("the refused decision moved the operation to %s", st)
		}
		if got, _ := e.actions(rec.OperationID); strings.Join(got, ",") != "failed alice,reconcile alice" {
			t.Errorf("audit log of the operation %v; want the request and its refusal", got)
		}
		if code, _, body := e.do(c, path, url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "evidence": {"provider shows tr_55"}}); code != http.StatusSeeOther {
			t.Fatalf("a decision agreeing with it: %d %s", code, body)
		}
		if st := e.state(rec.OperationID); st != idem.StateSucceeded {
			t.Errorf("after the agreeing decision the operation is %s; want SUCCEEDED", st)
		}
	})
}
