package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// hook is a webhook receiver: it verifies every delivery's signature with
// key (independently of package outbox), answers 200 and signals each new
// message ID on fresh.
type hook struct {
	*httptest.Server
	t     *testing.T
	key   []byte
	mu    sync.Mutex
	seen  map[string]int
	fresh chan string
}

func newHook(t *testing.T, key []byte) *hook {
	t.Helper()
	h := &hook{t: t, key: key, seen: map[string]int{}, fresh: make(chan string, 100)}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		mac := hmac.New(sha256.New, h.key)
		fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(r.Header.Get("webhook-signature")), []byte(want)) {
			t.Errorf("delivery %s: bad signature %q", id, r.Header.Get("webhook-signature"))
		}
		h.mu.Lock()
		h.seen[id]++
		first := h.seen[id] == 1
		h.mu.Unlock()
		if first {
			h.fresh <- id
		}
	}))
	t.Cleanup(h.Close)
	return h
}

// await waits until every id in ids was delivered.
func (h *hook) await(ids []string) {
	h.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	h.mu.Lock()
	for id := range h.seen {
		delete(want, id)
	}
	h.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case id := <-h.fresh:
			delete(want, id)
		case <-deadline:
			h.t.Fatalf("messages %v not delivered within 30s", want)
		}
	}
}

// secretFile writes a Standard Webhooks secret to a file and returns the
// file and the key.
func secretFile(t *testing.T) (string, []byte) {
	t.Helper()
	key := make([]byte, 24)
	rand.Read(key)
	path := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(path, []byte("whsec_"+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, key
}

// withOutbox completes an operation with n outbox messages (JSON payloads)
// and returns their IDs.
func (s *opsStore) withOutbox(n int) []string {
	s.t.Helper()
	ctx := s.t.Context()
	c := registry.Claim{Operation: "payments.create"}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rec, _, err := s.Reserve(ctx, c)
	if err != nil {
		s.t.Fatal(err)
	}
	out := registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{}`)}}
	var ids []string
	for i := range n {
		out.Outbox = append(out.Outbox, registry.Message{Topic: "payment.created", Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
		ids = append(ids, registry.MessageID(rec.OperationID, i))
	}
	if _, err := s.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) { return out, nil }); err != nil {
		s.t.Fatal(err)
	}
	return ids
}

// TestRelay: "idem relay" delivers the outbox and counts it on its
// --metrics-addr, which refuses a foreign Host (421).
// threat:admin-dns-rebinding
func TestRelay(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		s := openOpsStore(t, dsn)
		ids := s.withOutbox(3)
		secret, key := secretFile(t)
		h := newHook(t, key)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		logs := newLogWatch()
		go func() {
			done <- run(ctx, []string{"relay", "--db", dsn, "--webhook", h.URL, "--webhook-secret-file", secret, "--metrics-addr", "127.0.0.1:0"},
				stdio{in: strings.NewReader(""), out: io.Discard, err: logs})
		}()
		var addr string
		select {
		case addr = <-logs.addr:
		case code := <-done:
			t.Fatalf("relay exited %d before listening:\n%s", code, logs)
		}
		h.await(ids)
		more := s.withOutbox(2) // written while the relay runs
		h.await(more)
		// A delivery is counted once it is marked published, just after the
		// receiver answered: poll.
		for deadline := time.Now().Add(30 * time.Second); ; {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
			resp, body := do(t, req)
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "\nidem_outbox_delivered_total 5\n") &&
				strings.Contains(string(body), "\nidem_outbox_pending 0\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics %d without idem_outbox_delivered_total 5 and idem_outbox_pending 0 after 30s:\n%s", resp.StatusCode, body)
			}
			time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
		}
		rebound, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		rebound.Host = "rebinding.example" // a page that rebound its name to this address
		if resp, body := do(t, rebound); resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("relay metrics with a foreign Host: %d %s; want 421", resp.StatusCode, body)
		}
		cancel()
		if code := <-done; code != exitOK {
			t.Fatalf("relay exited %d:\n%s", code, logs)
		}
		if st, err := s.OutboxStats(t.Context()); err != nil || st.Pending != 0 || st.Dead != 0 {
			t.Errorf("after the relay: %+v, %v; want nothing pending", st, err)
		}
		if strings.Contains(logs.String(), base64.StdEncoding.EncodeToString(key)) {
			t.Errorf("the secret was logged:\n%s", logs)
		}
	})
}

func TestRelayRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "r.db")
	secret, _ := secretFile(t)
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"relay", "--db", db}, exitUsage},
		{[]string{"relay", "--db", db, "--webhook", "http://127.0.0.1:1"}, exitUsage},
		{[]string{"relay", "--db", db, "--webhook", "http://127.0.0.1:1", "--webhook-secret-file", secret, "--webhook-max-attempts", "0"}, exitUsage},
		{[]string{"relay", "--db", db, "--webhook", "http://127.0.0.1:1", "--webhook-secret-file", secret, "extra"}, exitUsage},
		{[]string{"relay", "--db", db, "--webhook", "http://127.0.0.1:1", "--webhook-secret-file", empty}, exitRefused},
		{[]string{"relay", "--db", db, "--webhook", "http://127.0.0.1:1", "--webhook-secret-file", filepath.Join(dir, "missing")}, exitRefused},
		{[]string{"serve", "--db", db, "--webhook", "http://127.0.0.1:1"}, exitUsage},
		{[]string{"serve", "--db", db, "--webhook", "127.0.0.1:1", "--webhook-secret-file", secret}, exitUsage},
		{[]string{"relay", "--db", db, "--webhook", "ftp://h/x", "--webhook-secret-file", secret}, exitUsage},
	} {
		if code, _, stderr := runCmd(t, "", c.args...); code != c.code {
			t.Errorf("%q: code %d, want %d; stderr:\n%s", c.args, code, c.code, stderr)
		}
	}
}

func TestServeDeliversOutbox(t *testing.T) {
	t.Parallel()
	secret, key := secretFile(t)
	h := newHook(t, key)
	// User info in the URL is sent, never logged.
	withPassword := strings.Replace(h.URL, "http://", "http://u:pw-hunter3@", 1)
	s := startServe(t, "--db", "sqlite:"+filepath.Join(t.TempDir(), "serve.db"), "--webhook", withPassword, "--webhook-secret-file", secret)
	resp, _ := s.post(t, "demo", "key-hook", `{"amount":"3","currency":"EUR","payee":"acct_1"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	h.await([]string{registry.MessageID(resp.Header.Get("Idempotency-Operation"), 0)})
	s.stop(t)
	if logs := s.logs.String(); strings.Contains(logs, "pw-hunter3") || !strings.Contains(logs, "delivering the outbox") {
		t.Errorf("serve logs show the webhook password, or no delivery line:\n%s", logs)
	}
}

func TestOpsDeadLetters(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		s := openOpsStore(t, dsn)
		ids := s.withOutbox(2)
		if _, err := s.ClaimOutbox(t.Context(), 10, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.FailOutbox(t.Context(), registry.OutboxFailure{ID: ids[1], Error: "webhook answered 410 Gone:\n\"bye\"", Dead: true}); err != nil {
			t.Fatal(err)
		}
		type deadOut struct {
			DeadLetters []deadLetterJSON `json:"dead_letters"`
		}
		got := opsJSON[deadOut](t, "ops", "dead-letters", "--db", dsn)
		if len(got.DeadLetters) != 1 {
			t.Fatalf("dead letters %+v, want 1", got)
		}
		if d := got.DeadLetters[0]; d.MessageID != ids[1] || d.Topic != "payment.created" || d.Attempts != 1 ||
			!strings.Contains(d.LastError, "410") || d.DeadAt.IsZero() || d.PayloadBytes != len(`{"n":1}`) {
			t.Errorf("dead letter %+v", d)
		}
		code, out, stderr := runCmd(t, "", "ops", "--db", dsn, "dead-letters")
		if code != exitOK || !strings.Contains(out, ids[1]) || strings.Contains(out, ids[0]) || strings.Count(out, "\n") != 2 {
			t.Errorf("dead-letters table: %d %q %q", code, out, stderr)
		}
		for _, c := range []struct {
			id   string
			want string
		}{{ids[0], "not a dead letter"}, {"op_nothing/0", "not found"}} {
			if code, _, stderr := runCmd(t, "", "ops", "requeue", c.id, "--db", dsn); code != exitRefused || !strings.Contains(stderr, c.want) {
				t.Errorf("requeue %s: code %d, stderr %q; want 1 and %q", c.id, code, stderr, c.want)
			}
		}
		if v := opsJSON[map[string]string](t, "ops", "requeue", ids[1], "--db", dsn); v["requeued"] != ids[1] {
			t.Errorf("requeue --json: %v", v)
		}
		if code, out, _ := runCmd(t, "", "ops", "dead-letters", "--db", dsn); code != exitOK || out != "no dead letters\n" {
			t.Errorf("after the requeue: %d %q", code, out)
		}
		if code, _, _ := runCmd(t, "", "ops", "requeue", "--db", dsn); code != exitUsage {
			t.Errorf("requeue without an ID: code %d, want %d", code, exitUsage)
		}
	})
}
