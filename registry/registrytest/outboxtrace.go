package registrytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// testOutboxTrace: the trace context of an outbox message
// (registry.Message.Trace, a W3C traceparent) is stored with it by every
// path that writes messages — Complete, ExecuteOnce and Reconcile — and
// read back as it was by ClaimOutbox and OperationOutbox; a message
// without one reads "" (docs/tracing.md).
func testOutboxTrace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	traced := func(tag string) registry.Outcome {
		out := outcome(tag, 2)
		id := e.bytes32()
		out.Outbox[0].Trace = fmt.Sprintf("00-%x-%x-01", id[:16], id[16:24])
		return out
	}
	want := map[string]string{} // message ID → its trace
	note := func(opID string, out registry.Outcome) {
		for i, m := range out.Outbox {
			want[registry.MessageID(opID, i)] = m.Trace
		}
	}

	rec := e.reserve(e.claim("conformance.trace"))
	out := traced("complete")
	e.complete(rec, out)
	note(rec.OperationID, out)

	once := traced("once")
	res, err := e.h.Store.ExecuteOnce(e.ctx, e.claim("conformance.trace"), func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return once, nil
	})
	if err != nil || res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce: %+v, %v", res, err)
	}
	note(res.Record.OperationID, once)

	u := e.unknown(e.claim("conformance.trace"))
	r := reconciliation("trace")
	r.Outbox = traced("reconcile").Outbox
	if _, err := e.h.Store.Reconcile(e.ctx, u.OperationID, r); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	note(u.OperationID, registry.Outcome{Outbox: r.Outbox})

	claimed, err := e.h.Store.ClaimOutbox(e.ctx, 100, time.Minute)
	if err != nil {
		t.Fatalf("ClaimOutbox: %v", err)
	}
	if len(claimed) != len(want) {
		t.Fatalf("claimed %d messages, want %d", len(claimed), len(want))
	}
	for _, m := range claimed {
		if w, ok := want[m.ID]; !ok || m.Trace != w {
			t.Errorf("claimed message %s: trace %q, want %q", m.ID, m.Trace, w)
		}
		stored, err := e.h.Store.OperationOutbox(e.ctx, m.OperationID)
		if err != nil {
			t.Fatalf("OperationOutbox: %v", err)
		}
		for _, s := range stored {
			if s.Trace != want[s.ID] {
				t.Errorf("OperationOutbox message %s: trace %q, want %q", s.ID, s.Trace, want[s.ID])
			}
		}
	}
}
