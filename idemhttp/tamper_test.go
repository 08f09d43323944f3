package idemhttp_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/registry"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestForgedReplayFailsClosed: on a store with a key ring, a database
// writer drops the triggers and replaces a finished operation's response
// with a plaintext one of its own, digest recomputed. The retry gets 503
// RESPONSE_UNREADABLE — never the forged body — the handler does not run
// again, and the middleware logs possible tampering and counts it in
// idem_tampered_total.
//
// threat:sealed-body-forgery
func TestForgedReplayFailsClosed(t *testing.T) {
	pgtest.EachDriver(t, "tamper.db", func(t *testing.T, driver, dsn string) {
		key, err := keyring.NewKey("k1")
		if err != nil {
			t.Fatal(err)
		}
		ring, err := keyring.New(keyring.File{Active: "k1", Keys: []keyring.Key{key}})
		if err != nil {
			t.Fatal(err)
		}
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Sealer: ring})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		exec := func(sql string, args ...any) {
			t.Helper()
			if err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
				_, err := tx.Exec(ctx, sql, args...)
				return err
			}); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		exec(`CREATE TABLE mw_effects (operation_id TEXT NOT NULL, note TEXT)`)
		logs := &syncBuffer{}
		f := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) {
			mw.Logger = slog.New(slog.NewTextHandler(logs, nil))
		})
		first := f.post("k-forged", `{"a":1}`)
		if first.status != 201 {
			t.Fatalf("first: %+v", first)
		}
		if driver == "postgres" {
			exec(`ALTER TABLE idem_operations DISABLE TRIGGER USER`)
		} else {
			exec(`DROP TRIGGER idem_operations_terminal`)
			exec(`DROP TRIGGER idem_operations_settled_body`)
		}
		forged := idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{"forged":"pay mallory"}`)}
		digest := forged.Digest()
		exec(`UPDATE idem_operations SET resp_body = $1, resp_key = NULL, resp_digest = $2, resp_status = 201,
			resp_media_type = 'application/json', resp_location = '', resp_etag = '' WHERE operation_id = $3`,
			forged.Body, digest[:], first.header.Get("Idempotency-Operation"))

		again := f.post("k-forged", `{"a":1}`)
		if again.status != 503 || code(again) != "RESPONSE_UNREADABLE" || strings.Contains(again.body, "mallory") {
			t.Errorf("replay of the forged body: %+v, want 503 RESPONSE_UNREADABLE", again)
		}
		if n := f.app.calls.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want 1", n)
		}
		if n := f.counted("idem_tampered_total", "operation", "things.create"); n != 1 {
			t.Errorf("idem_tampered_total %v, want 1", n)
		}
		if !strings.Contains(logs.String(), "possible tampering") {
			t.Errorf("no tampering in the log:\n%s", logs)
		}
	})
}
