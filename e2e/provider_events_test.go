package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/internal/keygen"
	"github.com/idemkit/idem/registry"
)

// eventsRelay stands between "idem provider --events-url" and "idem
// serve": a real HTTP server that answers 503 while no target is set
// (the receiver is down) and otherwise forwards each delivery, keeping
// what was sent and answered.
type eventsRelay struct {
	mu        sync.Mutex
	target    string
	delivered []relayed
}

type relayed struct {
	header http.Header
	body   []byte
	status int
	answer []byte
}

func (er *eventsRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	er.mu.Lock()
	target := er.target
	er.mu.Unlock()
	if target == "" {
		http.Error(w, "receiver down", http.StatusServiceUnavailable)
		return
	}
	req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	er.mu.Lock()
	er.delivered = append(er.delivered, relayed{r.Header.Clone(), body, resp.StatusCode, answer})
	er.mu.Unlock()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// acknowledged returns the first delivery the receiver answered 200.
func (er *eventsRelay) acknowledged() (relayed, bool) {
	er.mu.Lock()
	defer er.mu.Unlock()
	for _, d := range er.delivered {
		if d.status == http.StatusOK {
			return d, true
		}
	}
	return relayed{}, false
}

// signedEvent POSTs body to url as webhook-id id, signed with secret at
// time at.
func signedEvent(t *testing.T, url string, secret []byte, id string, at time.Time, body []byte) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	ts := at.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", provider.Sign(secret, id, ts, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// eventsMetric reads idem_provider_events_total{disposition=…} of s.
func eventsMetric(t *testing.T, s *server, disposition string) int {
	t.Helper()
	addr, err := s.child.AddrOf(t.Context(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^idem_provider_events_total\{disposition="` + disposition + `"\} (\d+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestProviderEventsSettleUnknown (issue 26): "idem serve" receives "idem
// provider"'s signed transfer events at POST /webhooks/provider, on
// SQLite and PostgreSQL, with the recovery worker out of the way
// (--recover-interval 1h):
//
//   - The provider executes a transfer and holds its answer until the
//     server's call times out (UNKNOWN). Its event is refused while the
//     receiver is down and while the call is in flight, and sent again
//     with backoff; once delivered, it makes the server look the key up,
//     and the lookup settles the transfer (GET /v1/transfers/{id} 200, no
//     client retry). The provider executed once.
//   - The delivered event re-sent (a new signature over the same id and
//     body) gets the stored answer as a replay, with no second handling.
//   - A forged event and a stale one are refused 401.
//   - A signed event claiming success for a transfer the provider never
//     executed (the provider failed it: UNKNOWN) leads to a lookup that
//     finds nothing and a re-send that fails: it is answered 503
//     TRANSFER_UNSETTLED and the transfer stays unsettled — the event
//     alone settles nothing.
//   - An event contradicting a settled transfer is recorded, logged at
//     ERROR and counted, and changes nothing.
//   - A signed event that is no transfer event is refused 422
//     EVENT_INVALID (its re-send a replay); one about no transfer of the
//     service, signed with the other secret the server takes (a
//     rotation), is answered 200 unmatched.
//
// threat:provider-event-as-evidence
// threat:webhook-forged
// threat:webhook-redelivery
func TestProviderEventsSettleUnknown(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dsn string) {
		dir := t.TempDir()
		secret := make([]byte, 32)
		rand.Read(secret)
		secretFile := filepath.Join(dir, "events.secret")
		if err := os.WriteFile(secretFile, []byte("whsec_"+base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// A rotation: the receiver also takes the secret being retired.
		retiring := make([]byte, 32)
		rand.Read(retiring)
		retiringFile := filepath.Join(dir, "retiring.secret")
		if err := os.WriteFile(retiringFile, []byte("whsec_"+base64.StdEncoding.EncodeToString(retiring)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		relay := &eventsRelay{}
		rs := httptest.NewServer(relay)
		defer rs.Close()
		prov := startChild(t, nil, "provider", "--addr", "127.0.0.1:0", "--state", filepath.Join(dir, "provider.state"),
			"--events-url", rs.URL+"/webhooks/provider", "--events-secret-file", secretFile)
		s := startServer(t, dsn, "--provider", prov.url, "--provider-timeout", "300ms", "--recover-interval", "1h",
			"--provider-events-secret-file", retiringFile, "--provider-events-secret-file", secretFile)
		control := func(mode string) {
			t.Helper()
			if r, err := prov.send(http.MethodPost, "/control", "", nil, `{"mode":"`+mode+`"}`); err != nil || r.status != http.StatusOK {
				t.Fatalf("provider mode %s: %v %v", mode, r, err)
			}
		}
		transfer := func(label string) (op string) {
			t.Helper()
			r, err := s.send(http.MethodPost, "/v1/transfers", "demo", postHeader(keygen.Derive(t.Name()+label)),
				`{"amount":"12.50","currency":"EUR","payee":"acct_1"}`)
			if err != nil || r.status != http.StatusConflict || !strings.Contains(string(r.body), "OUTCOME_UNKNOWN") {
				t.Fatalf("transfer %s: %v %v; want 409 OUTCOME_UNKNOWN", label, r, err)
			}
			return r.header.Get("Idempotency-Operation")
		}
		getTransfer := func(op string) int {
			t.Helper()
			r, err := s.send(http.MethodGet, "/v1/transfers/tr_"+strings.TrimPrefix(op, "op_"), "demo", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			return r.status
		}

		// The provider executes and holds the answer: the call times out.
		control("hang")
		op := transfer("/1")
		if getTransfer(op) != http.StatusNotFound {
			t.Fatalf("the transfer is settled before any event arrived")
		}
		relay.mu.Lock()
		relay.target = s.url + "/webhooks/provider" // the receiver is up
		relay.mu.Unlock()
		await(t, "the provider's event is delivered and answered 200", func() bool { _, ok := relay.acknowledged(); return ok })
		if st := getTransfer(op); st != http.StatusOK {
			t.Fatalf("GET the transfer after its event: %d, want 200 (settled by the event's lookup)", st)
		}
		control("ok")
		stats, _ := prov.send(http.MethodGet, "/stats", "", nil, "")
		if string(stats.body) != `{"executed":1,"declined":0}` {
			t.Errorf("provider stats %s; want one execution", stats.body)
		}
		first, _ := relay.acknowledged()
		var ans struct {
			OperationID string `json:"operation_id"`
			Disposition string `json:"disposition"`
			State       string `json:"state"`
		}
		json.Unmarshal(first.answer, &ans)
		if ans.OperationID != op || ans.Disposition != "settled" || ans.State != "SUCCEEDED" {
			t.Errorf("the event's answer %s; want settled SUCCEEDED for %s", first.answer, op)
		}

		// A re-send: the stored answer, no second handling.
		url := s.url + "/webhooks/provider"
		id := first.header.Get("webhook-id")
		again := signedEvent(t, url, secret, id, time.Now(), first.body)
		if again.status != http.StatusOK || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.answer) {
			t.Errorf("the re-sent event: %v; want the first answer %s replayed", again, first.answer)
		}
		if n := strings.Count(s.child.Log(), "payments: provider event\""); n != 1 {
			t.Errorf("%d events handled; want 1 (the re-send is a replay)", n)
		}

		// Forged and stale.
		other := make([]byte, 32)
		rand.Read(other)
		if r := signedEvent(t, url, other, "evt_forged", time.Now(), first.body); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "WEBHOOK_SIGNATURE_INVALID") {
			t.Errorf("a forged event: %v; want 401 WEBHOOK_SIGNATURE_INVALID", r)
		}
		if r := signedEvent(t, url, secret, "evt_stale", time.Now().Add(-time.Hour), first.body); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "WEBHOOK_TIMESTAMP_INVALID") {
			t.Errorf("a stale event: %v; want 401 WEBHOOK_TIMESTAMP_INVALID", r)
		}

		// An event is no evidence: the provider never executed this one.
		control("fail")
		op2 := transfer("/2")
		claim := []byte(`{"type":"transfer.succeeded","timestamp":"2026-01-01T00:00:00Z","data":{"id":"tr_99","key":"` +
			registry.DownstreamKey(op2, "provider.transfer") + `","reference":"` + op2 + `","status":"executed"}}`)
		if r := signedEvent(t, url, secret, "evt_claim", time.Now(), claim); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "TRANSFER_UNSETTLED") {
			t.Errorf("an event for a transfer the provider's lookup does not know: %v; want 503 TRANSFER_UNSETTLED", r)
		}
		if st := getTransfer(op2); st != http.StatusNotFound {
			t.Errorf("GET the transfer the event claimed: %d; want 404 (still UNKNOWN)", st)
		}
		stats, _ = prov.send(http.MethodGet, "/stats", "", nil, "")
		if string(stats.body) != `{"executed":1,"declined":0}` {
			t.Errorf("provider stats %s; want still one execution", stats.body)
		}
		control("ok")

		// A contradiction: recorded, logged, counted; nothing changes.
		var tr struct{ Data json.RawMessage }
		json.Unmarshal(first.body, &tr)
		var data map[string]any
		json.Unmarshal(tr.Data, &data)
		contra := []byte(`{"type":"transfer.declined","timestamp":"2026-01-01T00:00:00Z","data":{"key":"` + data["key"].(string) +
			`","status":"declined","code":"DECLINED","reference":"` + op + `"}}`)
		r := signedEvent(t, url, secret, "evt_contra", time.Now(), contra)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"disposition":"contradicts"`) {
			t.Errorf("a contradicting event: %v; want 200 contradicts", r)
		}
		awaitLog(t, s, "CONTRADICTS")
		if n := eventsMetric(t, s, "contradicts"); n != 1 {
			t.Errorf("idem_provider_events_total{disposition=\"contradicts\"} %d; want 1", n)
		}
		if st := getTransfer(op); st != http.StatusOK {
			t.Errorf("GET the transfer after the contradiction: %d; want 200 as before", st)
		}

		// Not a transfer event: 422, stored; about no transfer here: 200.
		for i := range 2 {
			if r := signedEvent(t, url, secret, "evt_other", time.Now(), []byte(`{"type":"refund.created","data":{}}`)); r.status != http.StatusUnprocessableEntity ||
				!strings.Contains(string(r.body), "EVENT_INVALID") || (i == 1) != (r.header.Get("Idempotent-Replayed") == "true") {
				t.Errorf("a signed event that is no transfer event, delivery %d: %v; want 422 EVENT_INVALID, the second a replay", i+1, r)
			}
		}
		stranger := []byte(`{"type":"transfer.succeeded","data":{"id":"tr_1","key":"idem-0000000000000000000000000000000000000000","reference":"op_01M8XAG6XJCRBR24WZJC7FDHQT"}}`)
		if r := signedEvent(t, url, retiring, "evt_stranger", time.Now(), stranger); r.status != http.StatusOK || !strings.Contains(string(r.body), `"disposition":"unmatched"`) {
			t.Errorf("an event about no transfer of the service: %v; want 200 unmatched", r)
		}
	})
}
