package e2e

import (
	"bytes"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/idemkit/idem/harness/launch"
)

// TestProviderRestartKeepsKeys (issue 27): "idem provider --state FILE"
// executes a transfer and is SIGKILLed right after its answer; a provider
// restarted on the same file answers the re-send of the same downstream
// key with the very bytes of the first answer, as a replay, and has
// executed one transfer in all — a recovery worker's re-send after a
// provider crash does not pay twice.
// threat:provider-forgets-keys
func TestProviderRestartKeepsKeys(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "provider.state")
	const key = "idem-0123456789abcdef0123456789abcdef01234567"
	const body = `{"amount":"12.50","currency":"EUR","payee":"acct_1","reference":"op_1"}`
	transfer := func(p *server) reply {
		t.Helper()
		r, err := p.send(http.MethodPost, "/transfers", "", http.Header{"Idempotency-Key": {key}}, body)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := startChild(t, nil, "provider", "--addr", "127.0.0.1:0", "--state", state)
	answer := transfer(first)
	if answer.status != http.StatusCreated {
		t.Fatalf("first transfer: %s", answer)
	}
	if err := first.child.Kill(); err != nil {
		t.Fatal(err)
	}
	if sig, ok := launch.ExitSignal(first.child.Wait()); !ok || sig != syscall.SIGKILL {
		t.Fatalf("the provider exited with %v; want death by SIGKILL", first.child.Wait())
	}

	again := startChild(t, nil, "provider", "--addr", "127.0.0.1:0", "--state", state)
	resent := transfer(again)
	if resent.status != http.StatusCreated || resent.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(resent.body, answer.body) {
		t.Errorf("the re-send after the restart: %s; want the first answer %s, replayed", resent, answer.body)
	}
	stats, err := again.send(http.MethodGet, "/stats", "", nil, "")
	if err != nil || string(stats.body) != `{"executed":1,"declined":0}` {
		t.Errorf("stats after the restart: %s %v; want one execution in all", stats, err)
	}
}
