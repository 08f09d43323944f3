package outbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/idemkit/idem/internal/secretfile"
	"github.com/idemkit/idem/internal/tracing"
	"github.com/idemkit/idem/registry"
)

// DefaultWebhookTimeout bounds one delivery (request and response) of a
// Webhook without a Client.
const DefaultWebhookTimeout = 10 * time.Second

// Webhook is a Publisher that delivers each message with one HTTP POST to
// URL, signed as the Standard Webhooks convention says:
//
//	POST URL
//	content-type: application/json
//	webhook-id: <message ID, "op_…/0": the same at every attempt; dedupe on it>
//	webhook-timestamp: <Unix seconds of this attempt>
//	webhook-signature: v1,<base64 of HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>
//
// with the body (see Body)
//
//	{"id":"op_…/0","type":"payment.created","operation_id":"op_…",
//	 "timestamp":"2031-03-04T05:06:07.123456Z","data":<the message payload>}
//
// Any 2xx answer is a delivery; anything else — another status (redirects
// are not followed), a timeout, a transport error — is a failed attempt.
// A Webhook is a Deliverer: the relay POSTs the messages of a batch
// concurrently, one request each, and records each answer as it comes.
// Publish does the same for a whole batch and reports the failed messages
// as DeliveryErrors. A Webhook is safe for concurrent use.
type Webhook struct {
	// URL receives the POSTs.
	URL string
	// Secret is the HMAC key (see ParseSecret).
	Secret []byte
	// Client sends the requests; nil means a client with
	// DefaultWebhookTimeout that does not follow redirects.
	Client *http.Client
	// Now is the clock of webhook-timestamp; nil means time.Now.
	Now func() time.Time
	// Propagator injects the delivery's trace context (the relay's
	// idem.outbox.deliver span, which continues the trace that recorded
	// the message) into the request's headers: W3C traceparent with
	// propagation.TraceContext{}. nil means otel.GetTextMapPropagator(),
	// which injects nothing until the application sets one.
	Propagator propagation.TextMapPropagator
}

// defaultClient is the Client of a Webhook without one.
var defaultClient = &http.Client{
	Timeout:       DefaultWebhookTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Publish delivers msgs concurrently; it returns nil when every one was
// delivered and DeliveryErrors otherwise. ctx governs the requests.
func (w *Webhook) Publish(ctx context.Context, msgs []registry.OutboxMessage) error {
	var (
		mu     sync.Mutex
		failed = DeliveryErrors{}
		wg     sync.WaitGroup
	)
	for _, m := range msgs {
		wg.Go(func() {
			if err := w.Deliver(ctx, m); err != nil {
				mu.Lock()
				failed[m.ID] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) == 0 {
		return nil
	}
	return failed
}

// Deliver POSTs one message and returns nil if the answer was 2xx. A
// payload that is not JSON fails Permanent: no retry would change it.
// ctx governs the request.
func (w *Webhook) Deliver(ctx context.Context, m registry.OutboxMessage) error {
	body, err := Body(m)
	if err != nil {
		return Permanent(err)
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	ts := now().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", m.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(w.Secret, m.ID, ts, body))
	tracing.Propagator(w.Propagator).Inject(ctx, propagation.HeaderCarrier(req.Header))
	client := w.Client
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Read a little of the answer, for the error, and drain a little more
	// so the connection can be reused.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // best effort
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook answered %s: %q", resp.Status, strings.TrimSpace(string(snippet)))
	}
	return nil
}

// body is the JSON a webhook delivers.
type body struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	OperationID string          `json:"operation_id"`
	Timestamp   time.Time       `json:"timestamp"`
	Data        json.RawMessage `json:"data"`
}

// Body returns the body a Webhook POSTs for m: one JSON object with the
// message ID ("id"), its topic ("type"), the operation that wrote it
// ("operation_id"), when it was written ("timestamp", RFC 3339 UTC) and
// its payload as it is ("data") — the same bytes at every attempt. The
// payload must be JSON.
func Body(m registry.OutboxMessage) ([]byte, error) {
	if !json.Valid(m.Payload) {
		return nil, fmt.Errorf("outbox: message %s: payload is not JSON", m.ID)
	}
	return json.Marshal(body{ID: m.ID, Type: m.Topic, OperationID: m.OperationID, Timestamp: m.CreatedAt.UTC(), Data: m.Payload})
}

// Sign returns the webhook-signature value of a delivery:
// "v1," + base64(HMAC-SHA256(secret, id + "." + timestamp + "." + body)).
func Sign(secret []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// secretPrefix marks a Standard Webhooks secret: base64 after it.
const secretPrefix = "whsec_"

// MinSecretSize is the least number of bytes of a webhook signing key
// ParseSecret accepts: 24, as Standard Webhooks requires (192 bits).
const MinSecretSize = 24

// ParseSecret returns the HMAC key a secret names: the base64-decoded
// remainder of a Standard Webhooks secret "whsec_<base64>", or else the
// secret's bytes as they are. Surrounding white space (a file's final
// newline) is dropped first. A key shorter than MinSecretSize bytes is an
// error.
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, secretPrefix); ok {
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("outbox: webhook secret %s…: %w", secretPrefix, err)
		}
		s = string(key)
	}
	if s == "" {
		return nil, errors.New("outbox: the webhook secret is empty")
	}
	if len(s) < MinSecretSize {
		return nil, fmt.Errorf("outbox: the webhook secret is %d bytes; it needs at least %d (Standard Webhooks): make one with 24 or more random bytes, \"whsec_\" + base64", len(s), MinSecretSize)
	}
	return []byte(s), nil
}

// LoadSecret reads a secret file and parses it with ParseSecret. It
// refuses a file its group or others may read or change
// (internal/secretfile).
func LoadSecret(path string) ([]byte, error) {
	b, err := secretfile.Read(path, "webhook secret file", 1<<16)
	if err != nil {
		return nil, fmt.Errorf("outbox: webhook secret: %w", err)
	}
	return ParseSecret(string(b))
}
