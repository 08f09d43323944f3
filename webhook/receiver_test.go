package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/webhook"
)

func TestMain(m *testing.M) { pgtest.Main(mytest.Runner{M: m}) }

// receiverServer serves a Receiver whose handler records each event it
// runs in the business table events, in the registry's transaction.
func receiverServer(t *testing.T, dsn string, now func() time.Time) (url string, store registry.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := idemstore.Open(ctx, dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE events (webhook_id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rc, err := webhook.New(ctx, webhook.Config{
		Store:     st,
		Operation: idemhttp.Operation{Name: "provider.events", APIRevision: "v1"},
		Verifier:  &webhook.Verifier{Secrets: [][]byte{newSecret, oldSecret}, Now: now},
		Sender:    idem.Identity{Principal: "provider"},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := rc.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		body, _ := io.ReadAll(r.Body)
		if _, err := idemhttp.Tx(ctx).Exec(ctx, `INSERT INTO events (webhook_id, body) VALUES ($1, $2)`, r.Header.Get("webhook-id"), string(body)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"received":%q}`, idemhttp.OperationID(ctx))
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, st
}

// deliver POSTs body with h and returns the status, the problem code
// and whether the answer was a replay.
func deliver(t *testing.T, url string, h http.Header, body []byte) (int, string, bool, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p struct{ Code string }
	json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code, resp.Header.Get(idemhttp.HeaderReplayed) == "true", string(b)
}

// events counts the business rows the handler wrote.
func events(t *testing.T, st registry.Store) int {
	t.Helper()
	var n int
	if err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReceiverOnce: a signed delivery runs the handler once; its re-send
// (a new timestamp and signature, as a sender's retry has) and 20
// concurrent copies get the stored answer without a second event; a
// forged, stale or unsigned delivery is refused 401 with its code and
// records nothing; another body under the same webhook-id is refused 422
// PAYLOAD_CONFLICT. On SQLite and PostgreSQL.
// threat:webhook-forged
// threat:webhook-redelivery
func TestReceiverOnce(t *testing.T) {
	pgtest.EachDriver(t, "events.db", func(t *testing.T, driver, dsn string) {
		now := time.Now
		url, st := receiverServer(t, dsn, now)
		body := []byte(`{"type":"transfer.settled","data":{"id":"tr_1"}}`)
		status, _, replayed, first := deliver(t, url, signed(oldSecret, "msg_1", time.Now(), body), body)
		if status != http.StatusOK || replayed {
			t.Fatalf("first delivery: %d replayed=%v %s", status, replayed, first)
		}
		var wg sync.WaitGroup
		answers := make([]string, 20)
		for i := range answers {
			wg.Go(func() {
				status, _, _, b := deliver(t, url, signed(newSecret, "msg_1", time.Now().Add(time.Duration(i)*time.Second), body), body)
				answers[i] = fmt.Sprint(status, " ", b)
			})
		}
		wg.Wait()
		for i, a := range answers {
			if a != fmt.Sprint(http.StatusOK, " ", first) {
				t.Errorf("re-send %d: %s, want the first answer %s", i, a, first)
			}
		}
		other := mustSecret("whsec_b3RoZXItc2VuZGVyLXNlY3JldC0xMjM0NTY3OA==")
		for name, c := range map[string]struct {
			h    http.Header
			code idem.Code
		}{
			"forged":   {signed(other, "msg_2", time.Now(), body), webhook.CodeSignatureInvalid},
			"stale":    {signed(oldSecret, "msg_3", time.Now().Add(-time.Hour), body), webhook.CodeTimestampInvalid},
			"unsigned": {http.Header{}, webhook.CodeUnsigned},
		} {
			if status, code, _, b := deliver(t, url, c.h, body); status != http.StatusUnauthorized || code != string(c.code) {
				t.Errorf("%s: %d %s, want 401 %s", name, status, b, c.code)
			}
		}
		changed := []byte(`{"type":"transfer.settled","data":{"id":"tr_9"}}`)
		if status, code, _, b := deliver(t, url, signed(oldSecret, "msg_1", time.Now(), changed), changed); status != http.StatusUnprocessableEntity || code != string(idem.CodePayloadConflict) {
			t.Errorf("another body under msg_1: %d %s, want 422 PAYLOAD_CONFLICT", status, b)
		}
		if n := events(t, st); n != 1 {
			t.Errorf("%d events recorded, want 1", n)
		}
	})
}

// TestReceiverTakesOutboxDeliveries: idem's own outbox webhook, delivering
// one message twice (a relay whose first answer was lost), is answered
// once by a Receiver with the same secret: one event, the second answer a
// replay.
func TestReceiverTakesOutboxDeliveries(t *testing.T) {
	url, st := receiverServer(t, "sqlite:"+t.TempDir()+"/events.db", nil)
	wh := &outbox.Webhook{URL: url, Secret: oldSecret}
	msg := registry.OutboxMessage{ID: "op_01ABC/0", OperationID: "op_01ABC", Topic: "payment.created", Payload: []byte(`{"amount":"1.00"}`), CreatedAt: time.Now()}
	for i := range 2 {
		if err := wh.Deliver(context.Background(), msg); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if n := events(t, st); n != 1 {
		t.Errorf("%d events from two deliveries of one message, want 1", n)
	}
}
