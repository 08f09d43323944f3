package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

// untouched fails unless operation id is still UNKNOWN, with no
// reconciliation and no settlement request.
func (e *env) untouched(id string) {
	e.t.Helper()
	if st := e.state(id); st != idem.StateUnknown {
		e.t.Fatalf("operation %s is %s, want it still UNKNOWN", id, st)
	}
	if log, err := e.store.Reconciliations(e.t.Context(), id); err != nil || len(log) != 0 {
		e.t.Fatalf("reconciliations %+v, %v; want none", log, err)
	}
	if p, err := e.store.PendingSettlement(e.t.Context(), id); err == nil {
		e.t.Fatalf("a settlement request was stored: %+v", p)
	}
}

// TestConsoleLookupBindsOperator: "Ask the downstream" answered
// "executed, handle tr_2" is recorded on the effect and shown with who
// asked; the same operator's "failed" a moment later is refused with 409
// CONTRADICTS_EVIDENCE and nothing changes, and evidence that names
// nothing is 422 EVIDENCE_TOO_WEAK.
//
// threat:operator-contradicts-lookup threat:weak-evidence
func TestConsoleLookupBindsOperator(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{Kind: effect.Executed, Handle: "tr_2", Detail: "GET /transfers/by-key answered 200"}, func(t *testing.T, e *env) {
		rec := e.unknown()
		id, detail := rec.OperationID, "/admin/operations/"+rec.OperationID
		c, csrf := e.login(aliceToken)
		if code, _, body := e.do(c, detail+"/effects/transfer/lookup", url.Values{"csrf": {csrf}}); code != http.StatusSeeOther {
			t.Fatalf("lookup: %d %s", code, body)
		}
		ls, err := e.store.Lookups(t.Context(), id)
		if err != nil || len(ls) != 1 || ls[0].Answer != registry.LookupExecuted || ls[0].Handle != "tr_2" || ls[0].Actor != "alice" {
			t.Fatalf("recorded lookups %+v, %v; want executed tr_2 asked by alice", ls, err)
		}
		_, _, body := e.do(c, detail, nil)
		if !strings.Contains(body, `<tr class="recorded-lookup" data-answer="executed">`) || !strings.Contains(body, `<td class="handle"><bdi class="id">tr_2</bdi></td><td class="actor">alice</td>`) {
			t.Errorf("the page does not show the recorded lookup: %s", body)
		}

		code, _, body := e.do(c, detail+"/reconcile", url.Values{"csrf": {csrf}, "outcome": {"failed"}, "evidence": {"I believe it failed"}})
		if code != http.StatusUnprocessableEntity || errorCode(body) != "EVIDENCE_TOO_WEAK" {
			t.Errorf("evidence that names nothing: %d %q; want 422 EVIDENCE_TOO_WEAK", code, errorCode(body))
		}
		code, _, body = e.do(c, detail+"/reconcile", url.Values{"csrf": {csrf}, "outcome": {"failed"}, "evidence": {"INC-7: I believe it failed"}})
		if code != http.StatusConflict || errorCode(body) != "CONTRADICTS_EVIDENCE" || !strings.Contains(body, "tr_2") {
			t.Fatalf("failed after an executed lookup: %d %q; want 409 CONTRADICTS_EVIDENCE naming tr_2", code, errorCode(body))
		}
		e.untouched(id)
	})
}

// TestConsoleFailedNeedsSecondOperator: "failed" with no definite answer
// recorded (the lookup found nothing) is stored as a request and shown;
// its requester gets no approve form and is refused (409 SELF_APPROVAL);
// a second operator approves it (not without the form's CSRF token) and
// only then is the operation FAILED_FINAL, logged as both.
//
// threat:one-operator-failed
func TestConsoleFailedNeedsSecondOperator(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{Kind: effect.NotFound, Detail: "GET /transfers/by-key answered 404"}, func(t *testing.T, e *env) {
		rec := e.unknown()
		id, detail := rec.OperationID, "/admin/operations/"+rec.OperationID
		alice, aCSRF := e.login(aliceToken)
		if code, _, body := e.do(alice, detail+"/effects/transfer/lookup", url.Values{"csrf": {aCSRF}}); code != http.StatusSeeOther {
			t.Fatalf("lookup: %d %s", code, body)
		}
		code, loc, body := e.do(alice, detail+"/reconcile", url.Values{"csrf": {aCSRF}, "outcome": {"failed"}, "evidence": {"OPS-12: provider support found no transfer"}})
		if code != http.StatusSeeOther {
			t.Fatalf("failed without a definite answer: %d %s", code, body)
		}
		if st := e.state(id); st != idem.StateUnknown {
			t.Fatalf("the request settled the operation: %s", st)
		}
		_, _, body = e.do(alice, loc, nil)
		if !strings.Contains(body, `<div id="pending" data-approved="no">`) || !strings.Contains(body, `id="pending-requester">alice<`) || strings.Contains(body, `<form id="approve"`) {
			t.Errorf("the requester's page: want the pending request without an approve form: %s", body)
		}
		if code, _, body := e.do(alice, detail+"/approve", url.Values{"csrf": {aCSRF}}); code != http.StatusConflict || errorCode(body) != "SELF_APPROVAL" {
			t.Errorf("approval by the requester: %d %q; want 409 SELF_APPROVAL", code, errorCode(body))
		}
		if st := e.state(id); st != idem.StateUnknown {
			t.Fatalf("the self-approval settled the operation: %s", st)
		}

		bob, bCSRF := e.login(bobToken)
		if _, _, body := e.do(bob, detail, nil); !strings.Contains(body, `<form id="approve"`) {
			t.Fatalf("a second operator's page has no approve form: %s", body)
		}
		if code, _, body := e.do(bob, detail+"/approve", url.Values{}); code != http.StatusForbidden || errorCode(body) != "CSRF_INVALID" || e.state(id) != idem.StateUnknown {
			t.Errorf("approval without the CSRF token: %d %q; want 403 CSRF_INVALID, nothing changed", code, errorCode(body))
		}
		if code, _, body := e.do(bob, detail+"/approve", url.Values{"csrf": {bCSRF}}); code != http.StatusSeeOther {
			t.Fatalf("approval by bob: %d %s", code, body)
		}
		if st := e.state(id); st != idem.StateFailedFinal {
			t.Fatalf("after the approval: %s, want FAILED_FINAL", st)
		}
		log, err := e.store.Reconciliations(t.Context(), id)
		if err != nil || len(log) != 1 || log[0].Actor != "alice, approved by bob" {
			t.Errorf("reconciliation log %+v, %v", log, err)
		}
		got, _ := e.actions(id)
		for _, want := range []string{"reconcile alice", "reconcile.pending alice", "reconcile.approve bob"} {
			if !strings.Contains(strings.Join(got, ","), want) {
				t.Errorf("audit log %v lacks %q", got, want)
			}
		}
	})
}
