package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// webhookDeadline bounds the wait for every message after the restart: the
// killed server's claim (a lease of 2 × 2 s + 5 s) must run out first.
const webhookDeadline = 60 * time.Second

// TestWebhookDeliveryAcrossCrash (SPEC E4): idem serve delivers the
// payment.created outbox messages to a webhook that answers 500 to the
// first deliveries and then holds one; the server is SIGKILLed while the
// receiver holds that request, and a restarted server on the same
// database delivers the rest. Every message of every payment created
// (before and after the crash) arrives at least once, every delivery is
// signed correctly, and none is dead-lettered.
func TestWebhookDeliveryAcrossCrash(t *testing.T) {
	t.Parallel()
	eachDB(t, webhookAcrossCrash)
}

// webhookReceiver is the receiving end: it checks every delivery's
// signature (an independent verification: HMAC-SHA256 over
// "id.timestamp.body", base64, constant-time comparison) and its body,
// answers 500 to the first fails deliveries, holds the next one until
// release is closed, and answers 204 to every later one.
type webhookReceiver struct {
	t       *testing.T
	key     []byte
	fails   int
	held    chan struct{} // closed when the held delivery arrived
	release chan struct{}

	mu       sync.Mutex
	n        int            // deliveries so far
	received map[string]int // answered 2xx, by webhook-id
	seen     map[string]int // every delivery, by webhook-id
	fresh    chan string    // a webhook-id answered 2xx for the first time
}

func (rc *webhookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	id, ts, sig := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature")
	mac := hmac.New(sha256.New, rc.key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if err != nil || id == "" || !hmac.Equal([]byte(sig), []byte(want)) {
		rc.t.Errorf("delivery %q: signature %q does not verify (read error %v)", id, sig, err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var b struct {
		ID          string          `json:"id"`
		Type        string          `json:"type"`
		OperationID string          `json:"operation_id"`
		Data        json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.ID != id || b.Type != "payment.created" ||
		registry.MessageID(b.OperationID, 0) != id || len(b.Data) == 0 {
		rc.t.Errorf("delivery %s: body %s (%v)", id, body, err)
	}
	rc.mu.Lock()
	rc.n++
	n := rc.n
	rc.seen[id]++
	rc.mu.Unlock()
	switch {
	case n <= rc.fails:
		w.WriteHeader(http.StatusInternalServerError)
		return
	case n == rc.fails+1:
		close(rc.held)
		select {
		case <-rc.release:
		case <-r.Context().Done():
		}
		return // the sender is dead: nobody reads the answer
	}
	rc.mu.Lock()
	rc.received[id]++
	first := rc.received[id] == 1
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	if first {
		rc.fresh <- id
	}
}

func webhookAcrossCrash(t *testing.T, dsn string) {
	key := []byte("e2e webhook key of " + t.Name())
	secret := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(secret, []byte("whsec_"+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := &webhookReceiver{
		t: t, key: key, fails: 3, held: make(chan struct{}), release: make(chan struct{}),
		received: map[string]int{}, seen: map[string]int{}, fresh: make(chan string, 100),
	}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	defer func() {
		select {
		case <-rc.release:
		default:
			close(rc.release)
		}
	}()
	flags := []string{"--webhook", hook.URL, "--webhook-secret-file", secret,
		"--webhook-backoff", "100ms", "--webhook-timeout", "2s"}

	a := startChild(t, nil, append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dsn}, flags...)...)
	var want []string
	for i := range 6 {
		r := a.post(t, "demo", fmt.Sprintf("hook-a-%d", i), payBody)
		want = append(want, registry.MessageID(wantCreated(t, "POST to A", r), 0))
	}
	select {
	case <-rc.held:
	case <-time.After(webhookDeadline):
		t.Fatalf("no delivery reached the receiver's hold within %v", webhookDeadline)
	}
	// SIGKILL while the receiver holds a delivery: A dies mid-delivery.
	if err := a.child.Kill(); err != nil {
		t.Fatal(err)
	}
	wantKilled(t, a)
	close(rc.release)

	b := startServer(t, dsn, flags...)
	for i := range 3 {
		r := b.post(t, "demo", fmt.Sprintf("hook-b-%d", i), payBody)
		want = append(want, registry.MessageID(wantCreated(t, "POST to B", r), 0))
	}

	missing := map[string]bool{}
	rc.mu.Lock()
	for _, id := range want {
		if rc.received[id] == 0 {
			missing[id] = true
		}
	}
	rc.mu.Unlock()
	deadline := time.After(webhookDeadline)
	for len(missing) > 0 {
		select {
		case id := <-rc.fresh:
			delete(missing, id)
		case <-deadline:
			t.Fatalf("messages %v not delivered within %v of the restart", missing, webhookDeadline)
		}
	}
	rc.mu.Lock()
	t.Logf("%d deliveries for %d messages (3 answered 500, 1 held across the crash); per message %v", rc.n, len(want), rc.seen)
	for id := range rc.received {
		if !slices.Contains(want, id) {
			t.Errorf("delivery of %s, which no payment created", id)
		}
	}
	rc.mu.Unlock()

	// Nothing dead: ask the registry with the real binary.
	out, err := exec.Command(idemBin, "ops", "dead-letters", "--json", "--db", dsn).Output()
	if err != nil || string(out) != "{\"dead_letters\":[]}\n" {
		t.Errorf("idem ops dead-letters: %q (%v), want none", out, err)
	}
}
