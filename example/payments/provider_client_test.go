package payments

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/provider"
)

// TestProviderClient classifies the real demo provider's answers in each
// of its modes: only an execution and a final decline are evidence; a 503
// (before or after executing) and a lookup's 404 are not.
func TestProviderClient(t *testing.T) {
	prov := provider.New()
	srv := httptest.NewServer(prov.Handler())
	t.Cleanup(srv.Close)
	c := &ProviderClient{BaseURL: srv.URL + "/"}
	req := []byte(`{"amount":"1.00","currency":"EUR","payee":"acct_1","reference":"op_1"}`)
	send := func(mode provider.Mode, key string) effect.Answer {
		t.Helper()
		if err := prov.SetMode(mode); err != nil {
			t.Fatal(err)
		}
		return c.Send(t.Context(), key, req)
	}
	evidence := func(what string, a effect.Answer, want effect.Kind) {
		t.Helper()
		_, ok := a.Evidence()
		if a.Kind != want || ok != (want == effect.Executed || want == effect.Declined) || a.Detail == "" {
			t.Errorf("%s: %+v; want kind %s", what, a, want)
		}
	}
	ok := send(provider.ModeOK, "k-ok")
	evidence("ok", ok, effect.Executed)
	if ok.Handle == "" || len(ok.Body) == 0 {
		t.Errorf("an execution without handle or body: %+v", ok)
	}
	evidence("lookup of an executed key", c.Lookup(t.Context(), "k-ok"), effect.Executed)
	evidence("re-send of an executed key in fail mode", send(provider.ModeFail, "k-ok"), effect.Executed)

	evidence("decline", send(provider.ModeDecline, "k-decline"), effect.Declined)
	evidence("lookup of a declined key", c.Lookup(t.Context(), "k-decline"), effect.Declined)
	evidence("re-send of a declined key in ok mode", send(provider.ModeOK, "k-decline"), effect.Declined)

	evidence("fail (nothing executed)", send(provider.ModeFail, "k-fail"), effect.Indefinite)
	evidence("lookup of a key never executed", c.Lookup(t.Context(), "k-fail"), effect.NotFound)
	evidence("fail-after (executed, then 503)", send(provider.ModeFailAfter, "k-after"), effect.Indefinite)
	evidence("lookup after fail-after", c.Lookup(t.Context(), "k-after"), effect.Executed)

	other := []byte(`{"amount":"9.00","currency":"EUR","payee":"acct_1","reference":"op_1"}`)
	prov.SetMode(provider.ModeOK)
	evidence("payload conflict", c.Send(t.Context(), "k-ok", other), effect.Indefinite)

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("not json"))
	}))
	t.Cleanup(broken.Close)
	bc := &ProviderClient{BaseURL: broken.URL}
	evidence("unreadable 201", bc.Send(t.Context(), "k", req), effect.Indefinite)
	evidence("unreadable lookup", bc.Lookup(t.Context(), "k"), effect.Indefinite)
	broken.Close()
	evidence("unreachable", bc.Send(t.Context(), "k", req), effect.Indefinite)
}
