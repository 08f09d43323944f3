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

// TestStatus: the status page shows the control row and the UNKNOWN
// count; drain and epoch bump need confirm=yes (422
// CONFIRMATION_REQUIRED, nothing changed) and then call the Controller.
func TestStatus(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		c, csrf := e.login(aliceToken)
		_, _, body := e.do(c, "/admin/", nil)
		for _, want := range []string{`id="writer-epoch">0<`, `id="draining">off<`, `id="unknown-count">0<`, `id="unknown-oldest">—<`,
			`id="in-flight-count">0<`, `id="relay-lag">—<`, `id="dead-letters">0<`, `<form id="drain-on"`, `<form id="drain-off"`, `<form id="epoch-bump"`} {
			if !strings.Contains(body, want) {
				t.Errorf("status page lacks %q", want)
			}
		}
		e.unknown()
		if _, _, body := e.do(c, "/admin/", nil); !strings.Contains(body, `id="unknown-count">1<`) || strings.Contains(body, `id="unknown-oldest">—<`) {
			t.Errorf("status page after an UNKNOWN operation: %s", body)
		}

		control := func() registry.Control {
			ctl, err := e.store.Control(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return ctl
		}
		for _, path := range []string{"/admin/drain/on", "/admin/epoch/bump"} {
			for _, confirm := range []string{"", "no"} {
				if code, _, body := e.do(c, path, url.Values{"csrf": {csrf}, "confirm": {confirm}}); code != http.StatusUnprocessableEntity || errorCode(body) != "CONFIRMATION_REQUIRED" {
					t.Errorf("%s confirm=%q: %d %q", path, confirm, code, errorCode(body))
				}
			}
			if code, _, body := e.do(c, path, url.Values{"confirm": {"yes"}}); code != http.StatusForbidden || errorCode(body) != "CSRF_INVALID" {
				t.Errorf("%s without csrf: %d %q", path, code, errorCode(body))
			}
		}
		if ctl := control(); ctl.Draining || ctl.WriterEpoch != 0 {
			t.Fatalf("refused forms changed the control row: %+v", ctl)
		}
		if code, loc, _ := e.do(c, "/admin/drain/on", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); code != http.StatusSeeOther || !control().Draining {
			t.Fatalf("drain on: %d %q, draining %v", code, loc, control().Draining)
		} else if _, _, body := e.do(c, loc, nil); !strings.Contains(body, `id="draining">on<`) || !strings.Contains(body, `id="flash"`) {
			t.Errorf("status after drain on: %s", body)
		}
		if code, _, _ := e.do(c, "/admin/epoch/bump", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); code != http.StatusSeeOther || control().WriterEpoch != 1 {
			t.Errorf("epoch bump: %d, epoch %d", code, control().WriterEpoch)
		}
		if code, _, _ := e.do(c, "/admin/drain/off", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); code != http.StatusSeeOther || control().Draining {
			t.Errorf("drain off: %d, draining %v", code, control().Draining)
		}
	})
}

// TestResponseBody: the stored response's metadata is shown to every
// operator, its body only to one with show_responses.
func TestResponseBody(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		ctx := t.Context()
		c := registry.Claim{Operation: opKind}
		c.Scope[0], c.Fingerprint[0] = 1, 1
		rec, _, err := e.store.Reserve(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		resp := idem.Response{Status: 201, MediaType: "application/json", Location: "/v1/transfers/9", Body: []byte(`{"iban":"secret-body-5521"}`)}
		if _, err := e.store.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
			return registry.Outcome{State: idem.StateSucceeded, Response: resp}, nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			token string
			body  bool
		}{{bobToken, false}, {aliceToken, true}} {
			cl, _ := e.login(tc.token)
			code, _, page := e.do(cl, "/admin/operations/"+rec.OperationID, nil)
			if code != http.StatusOK || !strings.Contains(page, `id="response-status">201<`) || !strings.Contains(page, `id="response-size">27 bytes<`) ||
				!strings.Contains(page, `id="state">SUCCEEDED<`) {
				t.Errorf("%s: metadata missing: %d %s", tc.token, code, page)
			}
			if got := strings.Contains(page, "secret-body-5521"); got != tc.body {
				t.Errorf("%s: body shown %v; want %v", tc.token, got, tc.body)
			}
			if !tc.body && !strings.Contains(page, `id="response-body-hidden"`) {
				t.Errorf("%s: no sentence saying the body is hidden", tc.token)
			}
		}
	})
}
