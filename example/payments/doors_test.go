package payments

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// testDoors: requests no route matches answer problem+json — 404
// NOT_FOUND for an unknown path, 405 METHOD_NOT_ALLOWED with Allow for a
// known path with another method — and /readyz tells liveness from
// readiness: 200 while all is well, 503 with the reason while draining and
// once fenced, while /healthz stays 200.
func testDoors(t *testing.T, b *testBundle) {
	problem := func(r response, status int, code idem.Code) {
		t.Helper()
		var p struct{ Code idem.Code }
		if r.status != status || r.header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal(r.body, &p) != nil || p.Code != code {
			t.Errorf("got %v (Content-Type %q); want %d problem+json %s", r, r.header.Get("Content-Type"), status, code)
		}
	}
	problem(b.do(t, http.MethodGet, "/nope", "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
	put := b.do(t, http.MethodPut, "/v1/payments", "tok-alice", "", `{}`)
	problem(put, http.StatusMethodNotAllowed, CodeMethodNotAllowed)
	if allow := put.header.Get("Allow"); !strings.Contains(allow, "POST") || !strings.Contains(allow, "GET") {
		t.Errorf("405 Allow %q; want GET and POST", allow)
	}
	if r := b.do(t, http.MethodGet, "/readyz", "", "", ""); r.status != http.StatusOK || string(r.body) != `{"status":"ready"}` {
		t.Errorf("readyz: %v", r)
	}
	if err := b.store.SetDraining(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	problem(b.do(t, http.MethodGet, "/readyz", "", "", ""), http.StatusServiceUnavailable, idem.CodeDraining)
	if r := b.do(t, http.MethodGet, "/healthz", "", "", ""); r.status != http.StatusOK {
		t.Errorf("healthz while draining: %v; want 200 (alive, not ready)", r)
	}
	if err := b.store.SetDraining(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.BumpEpoch(t.Context()); err != nil {
		t.Fatal(err)
	}
	problem(b.do(t, http.MethodGet, "/readyz", "", "", ""), http.StatusServiceUnavailable, idem.CodeWriterFenced)
}
