package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/webhook"
)

// eventSink receives events, verifying each with a webhook.Verifier under
// the provider's secret: it answers 503 while down, else 200, and keeps
// every verified delivery.
type eventSink struct {
	verifier *webhook.Verifier
	mu       sync.Mutex
	down     bool
	got      []sunk
}

type sunk struct {
	id, body string
	answered int
}

func (k *eventSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id, err := k.verifier.Verify(r.Header, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	status := http.StatusOK
	if k.down {
		status = http.StatusServiceUnavailable
	}
	k.got = append(k.got, sunk{id, string(body), status})
	w.WriteHeader(status)
}

func (k *eventSink) setDown(down bool) { k.mu.Lock(); k.down = down; k.mu.Unlock() }

func (k *eventSink) deliveries() []sunk {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]sunk(nil), k.got...)
}

// waitNonePending polls until srv has no event left to send.
func waitNonePending(t *testing.T, srv *Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for srv.PendingEvents() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still pending after 10s", srv.PendingEvents())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProviderEvents: each executed or declined key is announced by one
// signed event (verified by webhook.Verifier) whose webhook-id and body
// stay the same across attempts; a delivery answered 503 is sent again
// until answered 2xx; with a state file, an event not acknowledged before
// the provider stopped is sent after it starts again, and one that was
// acknowledged is not.
func TestProviderEvents(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	sink := &eventSink{verifier: &webhook.Verifier{Secrets: [][]byte{secret}}, down: true}
	rs := httptest.NewServer(sink)
	defer rs.Close()
	state := filepath.Join(t.TempDir(), "provider.state")
	opts := Options{State: state, Events: Events{URL: rs.URL, Secret: secret, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}}
	srv, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{srv: srv, ts: httptest.NewServer(srv.Handler())}
	if resp, out := b.post(t, "k-1", `{"amount":"1.00","reference":"op_1"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("k-1: %d %s", resp.StatusCode, out)
	}
	b.control(t, ModeDecline)
	if resp, out := b.post(t, "k-2", `{"amount":"2.00","reference":"op_2"}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("k-2: %d %s", resp.StatusCode, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(sink.deliveries()) < 4 { // both refused at least twice
		if time.Now().After(deadline) {
			t.Fatalf("deliveries while the receiver is down: %v", sink.deliveries())
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.ts.Close()
	srv.Close()
	if n := srv.PendingEvents(); n != 2 {
		t.Fatalf("%d events pending when the provider stopped, want 2", n)
	}

	// The stopped provider's last attempt may still be in the receiver's
	// handler, its client gone: closing the receiver's server waits for
	// it (answered 503, the receiver being down), so that it cannot be
	// answered 2xx once the receiver is up and count as an ack the
	// provider never saw. The receiver comes back on a new address.
	rs.Close()
	rs = httptest.NewServer(sink)
	defer rs.Close()
	opts.Events.URL = rs.URL
	sink.setDown(false)
	srv, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	waitNonePending(t, srv)
	srv.Close()
	bodies := map[string]map[string]bool{}
	acked := map[string]int{}
	for _, d := range sink.deliveries() {
		if bodies[d.id] == nil {
			bodies[d.id] = map[string]bool{}
		}
		bodies[d.id][d.body] = true
		if d.answered == http.StatusOK {
			acked[d.id]++
		}
	}
	want := map[string]string{eventID("k-1"): EventSucceeded, eventID("k-2"): EventDeclined}
	for id, typ := range want {
		if len(bodies[id]) != 1 || acked[id] != 1 {
			t.Errorf("event %s: bodies %v, acknowledged %d times; want one body, acknowledged once", id, bodies[id], acked[id])
		}
		for body := range bodies[id] {
			var ev struct {
				Type string
				Data struct{ Key, Reference string }
			}
			if json.Unmarshal([]byte(body), &ev) != nil || ev.Type != typ || ev.Data.Reference == "" {
				t.Errorf("event %s: %s; want a %s with its reference", id, body, typ)
			}
		}
	}
	if len(bodies) != 2 {
		t.Errorf("events %v; want one per key", bodies)
	}

	// Acknowledged events are not sent again after another restart.
	srv, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.PendingEvents(); n != 0 {
		t.Errorf("%d events pending after a restart, all acknowledged before; want 0", n)
	}
	srv.Close()
}
