package provider

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Event types a provider sends (Options.Events), one event per key that
// executed or was declined.
const (
	// EventSucceeded: the transfer executed; data is the transfer's JSON,
	// the bytes POST /transfers answered.
	EventSucceeded = "transfer.succeeded"
	// EventDeclined: the key was declined for good; data is
	// {"key":…,"status":"declined","code":"DECLINED"[,"reference":…]}.
	EventDeclined = "transfer.declined"
)

// Defaults of Events fields left at zero.
const (
	DefaultEventTimeout    = 10 * time.Second
	DefaultEventBackoff    = time.Second
	DefaultEventMaxBackoff = time.Minute
)

// Events configures the signed events a Server sends about the transfers
// it executes or declines, the way payment providers announce them:
// Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature
// "v1,<base64 HMAC-SHA256(Secret, id.timestamp.body)>"), POSTed to URL as
// application/json with the body
//
//	{"type":"transfer.succeeded","timestamp":"<RFC 3339>","data":{…}}
//
// Delivery is at least once and in no promised order: an event is sent
// after its key's answer is recorded, and again, with exponential backoff
// (Backoff doubling up to MaxBackoff), until the receiver answers 2xx;
// events wait for one another only in that one sender sends one at a
// time. Each attempt is signed afresh (a new timestamp) over the same
// body and webhook-id ("evt_" and 32 hexadecimal digits of SHA-256 of
// the key: the same for ever, across restarts), so a receiver dedupes
// re-sends by webhook-id. With a state file (Options.State) the
// acknowledgements are kept in it, and events not acknowledged when the
// provider stopped are sent again after it starts.
type Events struct {
	// URL receives the events; "" sends none.
	URL string
	// Secret is the signing key (the bytes a "whsec_…" secret decodes
	// to). Required with URL.
	Secret []byte
	// Client sends them; nil means a client whose timeout is
	// DefaultEventTimeout.
	Client *http.Client
	// Backoff is the first wait after a failed attempt (0:
	// DefaultEventBackoff); each failure doubles it up to MaxBackoff (0:
	// DefaultEventMaxBackoff).
	Backoff, MaxBackoff time.Duration
	// Logger receives a line per failed attempt; nil means slog.Default().
	Logger *slog.Logger
}

// pendingEvent is an event not acknowledged yet.
type pendingEvent struct {
	id       string
	body     []byte
	wait     time.Duration // the last backoff
	next     time.Time     // not before
	attempts int
}

// eventID is the webhook-id of the event about key.
func eventID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "evt_" + hex.EncodeToString(sum[:16])
}

// eventBody is the body of the event about t, recorded at time at.
func eventBody(key string, t *transfer, fields map[string]json.RawMessage, at time.Time) []byte {
	typ, data := EventSucceeded, t.response
	if t.declined {
		typ = EventDeclined
		data = append([]byte(`{"key":`), appendString(nil, key)...)
		data = append(data, `,"status":"declined","code":"DECLINED"`...)
		if ref, ok := fields["reference"]; ok {
			data = append(append(data, `,"reference":`...), ref...)
		}
		data = append(data, '}')
	}
	b := append([]byte(`{"type":`), appendString(nil, typ)...)
	b = append(b, `,"timestamp":`...)
	b = append(appendString(b, at.UTC().Format(time.RFC3339Nano)), `,"data":`...)
	return append(append(b, data...), '}')
}

// Sign returns the webhook-signature value of an event: "v1," followed by
// base64(HMAC-SHA256(secret, id + "." + timestamp + "." + body)).
func Sign(secret []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// PendingEvents returns the number of events not acknowledged yet.
func (s *Server) PendingEvents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// sendEvents delivers the pending events until ctx ends.
func (s *Server) sendEvents(ctx context.Context, ev Events) {
	client := ev.Client
	if client == nil {
		client = &http.Client{Timeout: DefaultEventTimeout}
	}
	first, most := ev.Backoff, ev.MaxBackoff
	if first <= 0 {
		first = DefaultEventBackoff
	}
	if most <= 0 {
		most = DefaultEventMaxBackoff
	}
	log := ev.Logger
	if log == nil {
		log = slog.Default()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		s.mu.Lock()
		now := s.now()
		var due *pendingEvent
		var soonest time.Time
		for _, p := range s.pending {
			if !p.next.After(now) && (due == nil || p.next.Before(due.next)) {
				due = p
			} else if p.next.After(now) && (soonest.IsZero() || p.next.Before(soonest)) {
				soonest = p.next
			}
		}
		changed := s.changed
		var id string
		var body []byte
		if due != nil {
			id, body = due.id, due.body
		}
		s.mu.Unlock()
		if due != nil {
			err := deliver(ctx, client, ev, id, body)
			s.mu.Lock()
			if err == nil {
				s.deliveredLocked(id, log)
			} else if p := s.pending[id]; p != nil {
				p.attempts++
				p.wait = min(max(p.wait*2, first), most)
				p.next = s.now().Add(p.wait)
				log.Warn("provider: event not delivered; sending it again later", "webhook_id", id, "attempts", p.attempts, "retry_in", p.wait, "err", err)
			}
			s.mu.Unlock()
			continue
		}
		wait := time.Hour
		if !soonest.IsZero() {
			wait = soonest.Sub(now)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-changed:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// deliveredLocked drops the acknowledged event id and records the
// acknowledgement in the state file. A failure to record it only means
// the event is sent again after a restart.
func (s *Server) deliveredLocked(id string, log *slog.Logger) {
	if _, ok := s.pending[id]; !ok {
		return
	}
	delete(s.pending, id)
	if s.journal != nil {
		if err := s.journal.append(journalEntry{Delivered: id}); err != nil {
			log.Warn("provider: the event's acknowledgement could not be recorded; it is sent again after a restart", "webhook_id", id, "err", err)
		}
	}
	s.broadcastLocked()
}

// deliver makes one signed attempt to send an event: nil when the
// receiver answered 2xx.
func deliver(ctx context.Context, client *http.Client, ev Events, id string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ev.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(ev.Secret, id, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %d: %s", resp.StatusCode, bytes.TrimSpace(answer))
	}
	return nil
}
