package registrytest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// testSealedOutbox: with a key ring, outbox payloads are stored sealed
// (never in plaintext, each naming its key) and a claim hands the relay
// the plaintext. A payload moved from another message, an edited one, or
// a plaintext row a database writer inserted is handed over with no
// payload and Unreadable set (ErrTampered), so no relay delivers it.
//
// threat:outbox-payload-forgery
func testSealedOutbox(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	st := e.sealedStore(ring(t, "k1"))
	c := e.claim("conformance.sealed-outbox")
	rec, _, err := st.Reserve(e.ctx, c)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	out := outcome("sealed-outbox", 3)
	if _, err := st.Complete(e.ctx, rec, effect("sealed-outbox", out)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	ids := make([]string, 3)
	for i, m := range out.Outbox {
		ids[i] = registry.MessageID(rec.OperationID, i)
		if e.count(`SELECT count(*) FROM idem_outbox WHERE message_id = $1 AND payload = $2`, ids[i], m.Payload) != 0 {
			t.Errorf("message %s: the payload is stored in plaintext", ids[i])
		}
		if e.count(`SELECT count(*) FROM idem_outbox WHERE message_id = $1 AND payload_key = 'k1'`, ids[i]) != 1 {
			t.Errorf("message %s: the payload does not name key k1", ids[i])
		}
	}
	// A writer moves message 1's payload onto message 0, edits message 2's
	// and inserts a plaintext message of its own.
	e.exec(`UPDATE idem_outbox SET payload = (SELECT o.payload FROM idem_outbox o WHERE o.message_id = $1) WHERE message_id = $2`, ids[1], ids[0])
	e.exec(`UPDATE idem_outbox SET payload = $1 WHERE message_id = $2`, []byte("\x01edited-ciphertext-of-some-length"), ids[2])
	e.exec(`INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at)
		SELECT 'forged-message', operation_id, topic, $1, created_at FROM idem_outbox WHERE message_id = $2`,
		[]byte(`{"pay":"mallory"}`), ids[1])

	msgs, err := st.ClaimOutbox(e.ctx, 10, time.Minute)
	if err != nil {
		t.Fatalf("ClaimOutbox: %v", err)
	}
	got := map[string]registry.OutboxMessage{}
	for _, m := range msgs {
		got[m.ID] = m
	}
	if len(got) != 4 {
		t.Fatalf("claimed %d messages, want 4", len(got))
	}
	if m := got[ids[1]]; m.Unreadable != nil || !bytes.Equal(m.Payload, out.Outbox[1].Payload) {
		t.Errorf("the untouched message: payload %q unreadable %v, want its plaintext", m.Payload, m.Unreadable)
	}
	for _, id := range []string{ids[0], ids[2], "forged-message"} {
		if m := got[id]; !errors.Is(m.Unreadable, registry.ErrTampered) || m.Payload != nil {
			t.Errorf("message %s: payload %q unreadable %v, want no payload and ErrTampered", id, m.Payload, m.Unreadable)
		}
	}
}
