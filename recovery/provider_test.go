package recovery

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/provider"
)

func TestHTTPProvider(t *testing.T) {
	t.Parallel()
	prov := provider.New()
	srv := httptest.NewServer(prov.Handler())
	defer srv.Close()
	const key = "idem-0123456789abcdef0123456789abcdef01234567"
	p := HTTPProvider{BaseURL: srv.URL + "/"}
	if h, ok, err := p.Executed(t.Context(), key); err != nil || ok || h != "" {
		t.Fatalf("before the transfer: %q %v %v, want not executed", h, ok, err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{"amount":"1.00"}`))
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %v %v", resp, err)
	}
	resp.Body.Close()
	if h, ok, err := p.Executed(t.Context(), key); err != nil || !ok || !strings.HasPrefix(h, "tr_") {
		t.Fatalf("after the transfer: %q %v %v, want executed with a tr_ handle", h, ok, err)
	}
	if prov.Executed() != 1 {
		t.Errorf("asking executed something: %d transfers", prov.Executed())
	}

	for name, h := range map[string]http.HandlerFunc{
		"503":        func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) },
		"200 no id":  func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"status":"executed"}`)) },
		"200 broken": func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{`)) },
	} {
		bad := httptest.NewServer(h)
		if _, ok, err := (HTTPProvider{BaseURL: bad.URL}).Executed(t.Context(), key); err == nil || ok {
			t.Errorf("%s: executed %v, err %v; want an error", name, ok, err)
		}
		bad.Close()
	}
}
