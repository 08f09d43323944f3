package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/webhook"
)

var (
	oldSecret = mustSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	newSecret = mustSecret("whsec_c2VjcmV0LXJvdGF0ZWQtMjAyNi0xMi0wMy1rZXk=")
	clock     = time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
)

func mustSecret(s string) []byte {
	b, err := outbox.ParseSecret(s)
	if err != nil {
		panic(err)
	}
	return b
}

// signed returns the headers of a delivery of id and body at ts, signed
// with secret.
func signed(secret []byte, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", outbox.Sign(secret, id, ts.Unix(), body))
	return h
}

// TestVerify: a delivery verifies under any of the secrets (a rotation),
// with any one matching v1 signature among several; a changed body, id
// or timestamp, another secret, a timestamp outside the tolerance either
// way, and missing or repeated headers are refused with the error that
// says why. threat:webhook-forged
func TestVerify(t *testing.T) {
	v := &webhook.Verifier{Secrets: [][]byte{newSecret, oldSecret}, Now: func() time.Time { return clock }}
	body := []byte(`{"type":"transfer.settled","data":{"id":"tr_1"}}`)
	good := signed(oldSecret, "msg_1", clock.Add(-time.Minute), body)
	if id, err := v.Verify(good, body); err != nil || id != "msg_1" {
		t.Fatalf("a delivery signed with the old secret: %q, %v", id, err)
	}
	withNew := signed(newSecret, "msg_1", clock, body)
	withNew.Set("webhook-signature", "v2,AAAA "+good.Get("webhook-signature")[:10]+"x "+withNew.Get("webhook-signature"))
	if _, err := v.Verify(withNew, body); err != nil {
		t.Errorf("several signatures, one v1 matching under the new secret: %v", err)
	}
	other := mustSecret("whsec_b3RoZXItc2VuZGVyLXNlY3JldC0xMjM0NTY3OA==")
	cases := []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"changed body", good, []byte(`{"type":"transfer.settled","data":{"id":"tr_2"}}`), webhook.ErrSignature},
		{"another secret", signed(other, "msg_1", clock, body), body, webhook.ErrSignature},
		{"stale", signed(oldSecret, "msg_1", clock.Add(-6*time.Minute), body), body, webhook.ErrTimestamp},
		{"future", signed(oldSecret, "msg_1", clock.Add(6*time.Minute), body), body, webhook.ErrTimestamp},
		{"no signature", http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {"1"}}, body, webhook.ErrUnsigned},
		{"two ids", http.Header{"Webhook-Id": {"msg_1", "msg_2"}, "Webhook-Timestamp": good["Webhook-Timestamp"], "Webhook-Signature": good["Webhook-Signature"]}, body, webhook.ErrUnsigned},
		{"timestamp not a number", http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {"soon"}, "Webhook-Signature": good["Webhook-Signature"]}, body, webhook.ErrUnsigned},
	}
	changedID := good.Clone()
	changedID.Set("webhook-id", "msg_2")
	cases = append(cases, struct {
		name string
		h    http.Header
		body []byte
		want error
	}{"changed id", changedID, body, webhook.ErrSignature})
	for _, c := range cases {
		if _, err := v.Verify(c.h, c.body); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	only := &webhook.Verifier{Secrets: [][]byte{newSecret}, Now: func() time.Time { return clock }}
	if _, err := only.Verify(good, body); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("the old secret after the rotation ended: %v, want ErrSignature", err)
	}
}
