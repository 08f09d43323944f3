package outbox_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/registry"
)

// testSecret is a Standard Webhooks secret; testKey is its HMAC key.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var testKey, _ = base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a real HTTP server that records deliveries and answers
// each with status(ID, deliveries of the ID so far).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delivery
	byID   map[string]int
	status func(id string, n int) int // n: deliveries of id so far, this one included
}

func newReceiver(t *testing.T, status func(id string, n int) int) *receiver {
	t.Helper()
	r := &receiver{byID: map[string]int{}, status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("receiver: %v", err)
		}
		id := req.Header.Get("webhook-id")
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), body: b})
		r.byID[id]++
		n, status := r.byID[id], r.status
		r.mu.Unlock()
		w.WriteHeader(status(id, n))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// verify checks a delivery as a receiver would, independently of the
// package's Sign: HMAC-SHA256 over "id.timestamp.body" with testKey,
// base64, "v1," prefix, compared in constant time.
func verify(d delivery) error {
	id, ts, sig := d.header.Get("webhook-id"), d.header.Get("webhook-timestamp"), d.header.Get("webhook-signature")
	if id == "" || ts == "" || sig == "" {
		return fmt.Errorf("missing headers: id %q timestamp %q signature %q", id, ts, sig)
	}
	if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
		return fmt.Errorf("webhook-timestamp %q: %v", ts, err)
	}
	mac := hmac.New(sha256.New, testKey)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, d.body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return fmt.Errorf("signature %q, want %q", sig, want)
	}
	return nil
}

// jsonPayload makes every message's payload a JSON object.
func jsonPayload(i, j int) []byte { return fmt.Appendf(nil, `{"op":%d,"n":%d}`, i, j) }

func newWebhook(t *testing.T, url string) *outbox.Webhook {
	t.Helper()
	key, err := outbox.ParseSecret(testSecret + "\n")
	if err != nil {
		t.Fatal(err)
	}
	return &outbox.Webhook{URL: url, Secret: key}
}

func TestWebhookSignsEveryDelivery(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, 2, jsonPayload)
	rcv := newReceiver(t, func(string, int) int { return http.StatusNoContent })
	before := time.Now().Unix()
	r := &outbox.Relay{Store: f.store, Publisher: newWebhook(t, rcv.URL)}
	if n, err := r.RunOnce(t.Context()); err != nil || n != len(f.ids) {
		t.Fatalf("RunOnce = %d, %v; want %d delivered", n, err, len(f.ids))
	}
	if len(rcv.got) != len(f.ids) {
		t.Fatalf("receiver got %d deliveries, want %d", len(rcv.got), len(f.ids))
	}
	seen := map[string]bool{}
	for _, d := range rcv.got {
		if err := verify(d); err != nil {
			t.Errorf("delivery %s: %v", d.header.Get("webhook-id"), err)
		}
		ts, _ := strconv.ParseInt(d.header.Get("webhook-timestamp"), 10, 64)
		if ts < before || ts > time.Now().Unix() {
			t.Errorf("webhook-timestamp %d not the time of the delivery", ts)
		}
		if ct := d.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		var b struct {
			ID          string          `json:"id"`
			Type        string          `json:"type"`
			OperationID string          `json:"operation_id"`
			Timestamp   time.Time       `json:"timestamp"`
			Data        json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(d.body, &b); err != nil {
			t.Fatalf("body %s: %v", d.body, err)
		}
		id := d.header.Get("webhook-id")
		seen[id] = true
		if b.ID != id || b.OperationID == "" || registry.MessageID(b.OperationID, 0) != id && registry.MessageID(b.OperationID, 1) != id ||
			(b.Type != "a" && b.Type != "b") || b.Timestamp.IsZero() {
			t.Errorf("body %s does not describe message %s", d.body, id)
		}
		var data struct{ Op, N *int }
		if err := json.Unmarshal(b.Data, &data); err != nil || data.Op == nil || data.N == nil {
			t.Errorf("data %s is not the payload (%v)", b.Data, err)
		}
	}
	for _, id := range f.ids {
		if !seen[id] {
			t.Errorf("message %s never delivered", id)
		}
	}
}

func TestSignMatchesIndependentHMAC(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":1}`)
	got := outbox.Sign(testKey, "op_1/0", 1674087231, body)
	if err := verify(delivery{header: http.Header{
		"Webhook-Id": {"op_1/0"}, "Webhook-Timestamp": {"1674087231"}, "Webhook-Signature": {got},
	}, body: body}); err != nil {
		t.Error(err)
	}
	if other := outbox.Sign(testKey, "op_1/0", 1674087232, body); other == got {
		t.Error("the timestamp is not signed")
	}
}

// TestParseSecret: a Standard Webhooks secret gives its decoded key, any
// other text its bytes; an empty key, bad base64 and a key under 24
// bytes are refused. threat:webhook-secret-short
func TestParseSecret(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{testSecret, string(testKey), true},
		{"  " + testSecret + "\n", string(testKey), true},
		{"plain-bytes-of-24-or-more", "plain-bytes-of-24-or-more", true},
		{"plain-bytes", "", false},
		{"whsec_" + testSecret[6:10], "", false},
		{"whsec_!!!", "", false},
		{"whsec_", "", false},
		{"\n", "", false},
	} {
		got, err := outbox.ParseSecret(c.in)
		if (err == nil) != c.ok || string(got) != c.want {
			t.Errorf("ParseSecret(%q) = %q, %v; want %q ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	r := &outbox.Relay{BackoffBase: time.Second, BackoffMax: time.Minute}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		if got := r.Backoff(i + 1); got != w*time.Second {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
	d := &outbox.Relay{}
	if d.Backoff(1) != outbox.DefaultBackoffBase || d.Backoff(10) != 512*time.Second || d.Backoff(100) != outbox.DefaultBackoffMax {
		t.Errorf("default backoff %v %v %v, want 1s 8m32s 1h", d.Backoff(1), d.Backoff(10), d.Backoff(100))
	}
}

// at sets the fixture's clock (the store's and the relay's).
func (f *fixture) at(t time.Time) { f.now.Store(&t) }

func (f *fixture) clock() time.Time { return *f.now.Load() }

func TestDeadLetterAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, 1, jsonPayload)
	start := time.Now()
	f.at(start)
	rcv := newReceiver(t, func(string, int) int { return http.StatusInternalServerError })
	reg := prometheus.NewRegistry()
	r := &outbox.Relay{
		Store: f.store, Publisher: newWebhook(t, rcv.URL), MaxAttempts: 3,
		BackoffBase: time.Minute, BackoffMax: time.Hour, Now: f.clock,
		Metrics: outbox.NewMetrics(reg, f.store),
	}
	wait := []time.Duration{time.Minute, 2 * time.Minute}
	for attempt := 1; attempt <= 3; attempt++ {
		if n, err := r.RunOnce(t.Context()); err == nil || n != 0 {
			t.Fatalf("attempt %d: RunOnce = %d, %v; want 0 delivered and an error", attempt, n, err)
		}
		if attempt == 3 {
			break
		}
		// Just before the backoff ends nothing is claimed; at its end both
		// messages are.
		f.at(f.clock().Add(wait[attempt-1] - time.Second))
		if n, err := r.RunOnce(t.Context()); n != 0 || err != nil {
			t.Fatalf("during backoff %d: RunOnce = %d, %v; want nothing claimed", attempt, n, err)
		}
		f.at(f.clock().Add(time.Second))
	}
	for _, id := range f.ids {
		if n := rcv.count(id); n != 3 {
			t.Errorf("message %s delivered %d times, want 3 (MaxAttempts)", id, n)
		}
	}
	f.at(f.clock().Add(1000 * time.Hour))
	if n, err := r.RunOnce(t.Context()); n != 0 || err != nil {
		t.Fatalf("after the last attempt: RunOnce = %d, %v; want nothing claimed", n, err)
	}
	dead, err := f.store.DeadLetters(t.Context(), 10)
	if err != nil || len(dead) != len(f.ids) {
		t.Fatalf("DeadLetters = %d (%v), want %d", len(dead), err, len(f.ids))
	}
	for _, m := range dead {
		if m.Attempts != 3 || m.LastError == "" || m.DeadAt.IsZero() {
			t.Errorf("dead letter %+v, want 3 attempts, an error and a time", m)
		}
	}
	wantMetrics(t, reg, map[string]float64{
		"idem_outbox_failed_attempts_total": 6, "idem_outbox_dead_lettered_total": 2,
		"idem_outbox_delivered_total": 0, "idem_outbox_dead_letters": 2, "idem_outbox_pending": 0, "idem_outbox_lag_seconds": 0,
	})

	// Requeued, it is delivered once the receiver answers 2xx.
	rcv.mu.Lock()
	rcv.status = func(string, int) int { return http.StatusOK }
	rcv.mu.Unlock()
	if err := f.store.RequeueOutbox(t.Context(), f.ids[0]); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(t.Context()); n != 1 || err != nil {
		t.Fatalf("after the requeue: RunOnce = %d, %v; want 1 delivered", n, err)
	}
	wantMetrics(t, reg, map[string]float64{"idem_outbox_delivered_total": 1, "idem_outbox_dead_letters": 1})
}

func TestDeadLetterWhenTooOld(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, 1, jsonPayload)
	f.at(time.Now().Add(2 * time.Hour))
	rcv := newReceiver(t, func(string, int) int { return http.StatusBadGateway })
	r := &outbox.Relay{Store: f.store, Publisher: newWebhook(t, rcv.URL), MaxAge: time.Hour, Now: f.clock}
	if _, err := r.RunOnce(t.Context()); err == nil {
		t.Fatal("failed deliveries not reported")
	}
	if dead, err := f.store.DeadLetters(t.Context(), 10); err != nil || len(dead) != 2 || dead[0].Attempts != 1 {
		t.Errorf("DeadLetters = %+v (%v), want both messages dead after one attempt", dead, err)
	}
}

func TestNonJSONPayloadIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1) // message 0's payload is "x"
	rcv := newReceiver(t, func(string, int) int { return http.StatusOK })
	r := &outbox.Relay{Store: f.store, Publisher: newWebhook(t, rcv.URL)}
	if n, err := r.RunOnce(t.Context()); n != 1 || err == nil {
		t.Fatalf("RunOnce = %d, %v; want 1 delivered and an error", n, err)
	}
	if dead, err := f.store.DeadLetters(t.Context(), 10); err != nil || len(dead) != 1 || dead[0].ID != f.ids[0] {
		t.Errorf("DeadLetters = %+v (%v), want the non-JSON message only", dead, err)
	}
	if rcv.count(f.ids[0]) != 0 {
		t.Error("a message that cannot be encoded reached the receiver")
	}
}

func TestFailingMessageDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, 6, jsonPayload)
	f.at(time.Now())
	bad := f.ids[0]
	rcv := newReceiver(t, func(id string, _ int) int {
		if id == bad {
			return http.StatusServiceUnavailable
		}
		return http.StatusAccepted
	})
	r := &outbox.Relay{Store: f.store, Publisher: newWebhook(t, rcv.URL), Batch: 2, Now: f.clock}
	delivered := 0
	for range len(f.ids) { // at most one round per message; each claims 2
		n, _ := r.RunOnce(t.Context())
		delivered += n
	}
	if delivered != len(f.ids)-1 {
		t.Errorf("delivered %d, want every message but the failing one (%d)", delivered, len(f.ids)-1)
	}
	for _, id := range f.ids {
		want := 1
		if got := rcv.count(id); got != want {
			t.Errorf("message %s delivered %d times, want %d (its batch mate failed, its backoff holds)", id, got, want)
		}
	}
	// Once the backoff passed the failing message comes back, alone.
	f.at(f.clock().Add(outbox.DefaultBackoffBase))
	if n, err := r.RunOnce(t.Context()); n != 0 || err == nil || rcv.count(bad) != 2 {
		t.Errorf("after the backoff: RunOnce = %d, %v, failing message tried %d times; want it retried once more", n, err, rcv.count(bad))
	}
}

// wantMetrics checks the values of reg's unlabelled metrics by name.
func wantMetrics(t *testing.T, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				got[mf.GetName()] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[mf.GetName()] = m.Gauge.GetValue()
			}
		}
	}
	for name, w := range want {
		if v, ok := got[name]; !ok || v != w {
			t.Errorf("metric %s = %v (present %v), want %v", name, v, ok, w)
		}
	}
}

func TestSlowMessageDoesNotHoldBackOthers(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, 3, jsonPayload)
	slow := f.ids[2]
	held, release := make(chan struct{}), make(chan struct{})
	rcv := newReceiver(t, func(id string, _ int) int {
		if id == slow {
			close(held)
			<-release
		}
		return http.StatusOK
	})
	r := &outbox.Relay{Store: f.store, Publisher: newWebhook(t, rcv.URL)}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := r.RunOnce(t.Context())
		done <- result{n, err}
	}()
	<-held
	// While the slow delivery hangs, the others are marked published.
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := f.store.OutboxStats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending == 1 {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("while one delivery hangs: %d messages pending, want 1 (the others published)", st.Pending)
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not synchronisation
	}
	close(release)
	if res := <-done; res.n != len(f.ids) || res.err != nil {
		t.Errorf("RunOnce = %d, %v; want all %d delivered", res.n, res.err, len(f.ids))
	}
}
