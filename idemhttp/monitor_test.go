package idemhttp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// TestMonitor: the Link of a 409 answers 200 with the operation's state
// (in flight, then terminal with its status and resource) to its owner;
// another principal and an unknown ID get the same 404 bytes; no identity
// gets 401. Without MonitorPrefix a 409 carries no Link at all.
// Proves threat:monitor-oracle (docs/threat-model.md).
func TestMonitor(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		get := func(path, principal string) (int, []byte) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
			if principal != "" {
				req.Header.Set("X-Principal", principal)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, body
		}
		done := make(chan result)
		go func() { done <- f.post("slow", `{}`, "X-Test", "block") }()
		<-f.app.started
		busy := f.post("slow", `{}`)
		link := busy.header.Get("Link")
		op := busy.header.Get("Idempotency-Operation")
		if busy.status != http.StatusConflict || link != "</v1/operations/"+op+`>; rel="monitor"` {
			t.Fatalf("duplicate in flight: %+v", busy)
		}
		var v idemhttp.OperationView
		if status, body := get("/v1/operations/"+op, "alice"); status != 200 || json.Unmarshal(body, &v) != nil ||
			v.OperationID != op || v.State != idem.StateReserved || v.Links.Self != "/v1/operations/"+op || v.Status != 0 {
			t.Errorf("monitor of the operation in flight: %d %s", status, body)
		}
		f.app.release <- struct{}{}
		first := <-done
		if status, body := get("/v1/operations/"+op, "alice"); status != 200 || json.Unmarshal(body, &v) != nil ||
			v.State != idem.StateSucceeded || v.Status != 201 || v.Links.Resource != first.header.Get("Location") {
			t.Errorf("monitor of the finished operation: %d %s", status, body)
		}
		otherStatus, other := get("/v1/operations/"+op, "mallory")
		unknownStatus, unknown := get("/v1/operations/op_01AAAAAAAAAAAAAAAAAAAAAAAA", "alice")
		if otherStatus != 404 || unknownStatus != 404 || string(other) != string(unknown) {
			t.Errorf("another principal: %d %s; unknown ID: %d %s; want the same 404", otherStatus, other, unknownStatus, unknown)
		}
		if status, _ := get("/v1/operations/"+op, ""); status != 401 {
			t.Errorf("no identity: %d, want 401", status)
		}

		g := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) { mw.MonitorPrefix = "" })
		go func() { done <- g.post("slow2", `{}`, "X-Test", "block") }()
		<-g.app.started
		if r := g.post("slow2", `{}`); r.status != http.StatusConflict || r.header.Get("Link") != "" || r.header.Get("Idempotency-Operation") == "" {
			t.Errorf("without a monitor: %+v; want 409 with the operation ID and no Link", r)
		}
		g.app.release <- struct{}{}
		<-done
	})
}
