package outbox_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/registry"
)

// payloads is a Publisher that keeps the payload of every message.
type payloads struct {
	mu  sync.Mutex
	got map[string][]byte
}

func (p *payloads) Publish(_ context.Context, msgs []registry.OutboxMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.got[m.ID] = m.Payload
	}
	return nil
}

// TestRelayDeliversOnlySealedPayloads: with a key ring the relay
// publishes the plaintext of a sealed payload, and never a plaintext row
// a database writer inserted: that one becomes a dead letter at once,
// with the reason.
//
// threat:outbox-payload-forgery
func TestRelayDeliversOnlySealedPayloads(t *testing.T) {
	t.Parallel()
	key, err := keyring.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := keyring.New(keyring.File{Active: "k1", Keys: []keyring.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idemsqlite.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "o.db"), idemsqlite.Options{Sealer: ring})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	rec, _, err := store.Reserve(t.Context(), registry.Claim{Operation: "outbox.sealed", Scope: idem.ScopeHash{9}, Fingerprint: idem.Fingerprint{1}})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"pay":"alice"}`)
	done, err := store.Complete(t.Context(), rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return registry.Outcome{State: idem.StateSucceeded,
			Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{}`)},
			Outbox:   []registry.Message{{Topic: "a", Payload: payload}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	good := registry.MessageID(done.OperationID, 0)
	if _, err := store.DB().Exec(`INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at)
		SELECT 'forged', operation_id, topic, $1, created_at FROM idem_outbox WHERE message_id = $2`, []byte(`{"pay":"mallory"}`), good); err != nil {
		t.Fatal(err)
	}
	pub := &payloads{got: map[string][]byte{}}
	r := &outbox.Relay{Store: store, Publisher: pub}
	if _, err := r.RunOnce(t.Context()); err == nil || !strings.Contains(err.Error(), "forged") {
		t.Errorf("RunOnce: %v, want the forged message's failure reported", err)
	}
	if len(pub.got) != 1 || !bytes.Equal(pub.got[good], payload) {
		t.Errorf("published %q, want only %s with its plaintext", pub.got, good)
	}
	dead, err := store.DeadLetters(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != "forged" || !strings.Contains(dead[0].LastError, "tampering") {
		t.Errorf("dead letters %+v, want the forged message, refused as tampering", dead)
	}
}
