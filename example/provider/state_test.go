package provider

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openAt serves a provider with the state file path behind an httptest
// server; close stops both.
func openAt(t *testing.T, path string) (b *bundle, close func()) {
	t.Helper()
	srv, err := Open(Options{State: path})
	if err != nil {
		t.Fatal(err)
	}
	b = &bundle{srv: srv, ts: httptest.NewServer(srv.Handler())}
	return b, func() { b.ts.Close(); srv.Close() }
}

// TestProviderStateSurvivesRestart: a provider reopened on its state file
// answers an executed key and a declined key with the very bytes it
// answered first, as replays, and executes neither again; new keys go on
// from the next transfer id.
// threat:provider-forgets-keys
func TestProviderStateSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "provider.state")
	const body = `{"amount":"12.50","currency":"EUR","payee":"a<b&c","reference":"op_1"}`
	b, stop := openAt(t, path)
	resp, first := b.post(t, "k-1", body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", resp.StatusCode, first)
	}
	b.control(t, ModeDecline)
	if resp, out := b.post(t, "k-2", body); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("decline: %d %s", resp.StatusCode, out)
	}
	stop()

	b, stop = openAt(t, path)
	defer stop()
	resp, again := b.post(t, "k-1", body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again, first) {
		t.Errorf("k-1 after the restart: %d %v %s; want the first answer %s replayed", resp.StatusCode, resp.Header, again, first)
	}
	if resp, out := b.post(t, "k-2", body); resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("k-2 after the restart: %d %s; want the decline replayed", resp.StatusCode, out)
	}
	if resp, out := b.post(t, "k-1", `{"amount":"1.00"}`); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(out), codePayloadConflict) {
		t.Errorf("k-1 with another body after the restart: %d %s", resp.StatusCode, out)
	}
	if n := b.stats(t); n != 1 {
		t.Errorf("executed %d after the restart, want 1", n)
	}
	if resp, out := b.post(t, "k-3", body); resp.StatusCode != http.StatusCreated || !strings.Contains(string(out), `"id":"tr_2"`) {
		t.Errorf("a new key after the restart: %d %s; want tr_2", resp.StatusCode, out)
	}
}

// TestProviderStateTornAndForeign: a last line cut short by a crash (its
// key was never answered) is dropped and the file goes on from the lines
// before it; a file with a line that is not the provider's is refused.
func TestProviderStateTornAndForeign(t *testing.T) {
	path := filepath.Join(t.TempDir(), "provider.state")
	b, stop := openAt(t, path)
	if resp, out := b.post(t, "k-1", `{"amount":"1.00"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", resp.StatusCode, out)
	}
	stop()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"key":"k-2","request":"{}","resp`)
	f.Close()
	b, stop = openAt(t, path)
	if n := b.stats(t); n != 1 {
		t.Errorf("executed %d after a torn line, want 1", n)
	}
	if resp, out := b.post(t, "k-2", `{"amount":"2.00"}`); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the torn line's key: %d %s; want it new", resp.StatusCode, out)
	}
	stop()
	if b, stop = openAt(t, path); b.stats(t) != 2 {
		t.Errorf("after the torn line was cut and k-2 appended: executed %d, want 2", b.stats(t))
	}
	stop()

	foreign := filepath.Join(t.TempDir(), "foreign")
	os.WriteFile(foreign, []byte("hello\n"), 0o600)
	if _, err := Open(Options{State: foreign}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a foreign file: %v; want it refused naming line 1", err)
	}
}
