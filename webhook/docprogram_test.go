package webhook_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/docprogram"
)

// TestWebhookDocProgram: the receiver program of docs/webhooks.md, built
// in a fresh module and run (only its listen address is changed), answers
// a signed delivery, answers its re-send with the same bytes as a replay,
// and refuses a forged and a stale delivery 401.
func TestWebhookDocProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a fresh module")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	src := docprogram.Source(t, "docs/webhooks.md", "<!-- webhook-program", `"127.0.0.1:8082"`, `"`+addr+`"`)
	dir, bin := docprogram.Build(t, src)
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROVIDER_WEBHOOK_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "http://" + addr + "/webhooks/provider"
	body := []byte(`{"type":"transfer.settled","data":{"id":"tr_1"}}`)
	send := func(h http.Header) (*http.Response, string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header = h.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the program does not answer: %v\n%s", err, logs.String())
			}
			time.Sleep(50 * time.Millisecond) // polling for the program to listen
		}
	}
	first, b1 := send(signed(oldSecret, "msg_1", time.Now(), body))
	again, b2 := send(signed(oldSecret, "msg_1", time.Now(), body))
	if first.StatusCode != http.StatusOK || again.StatusCode != http.StatusOK || b1 != b2 || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("delivery and re-send: %d %q, %d %q %v", first.StatusCode, b1, again.StatusCode, b2, again.Header)
	}
	other := mustSecret("whsec_b3RoZXItc2VuZGVyLXNlY3JldC0xMjM0NTY3OA==")
	for name, h := range map[string]http.Header{
		"forged": signed(other, "msg_2", time.Now(), body),
		"stale":  signed(oldSecret, "msg_3", time.Now().Add(-time.Hour), body),
	} {
		if resp, b := send(h); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, resp.StatusCode, b)
		}
	}
}
