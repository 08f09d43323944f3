package e2e

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/example/payments"
)

// TestCheckHistory: the checker of the fault suite finds each kind of
// violation in a synthetic history, and none in a clean one — so a fault
// case that passes does so because the invariants held, not because the
// checker looked away.
func TestCheckHistory(t *testing.T) {
	const scope, fp, fp2, op, op2 = "demo|/v1/payments|v1|k", "aa", "bb", "op_1", "op_2"
	body := `{"id":"` + payments.PaymentID(op) + `","amount":"1.00"}`
	created := func(seq int, replayed bool) exchange {
		h := map[string]string{"Idempotency-Operation": op, "Content-Type": "application/json", "Location": "/v1/payments/" + payments.PaymentID(op)}
		if replayed {
			h["Idempotent-Replayed"] = "true"
		}
		return exchange{Seq: seq, Method: "POST", Path: "/v1/payments", Scope: scope, Fingerprint: fp, Status: 201, Header: h, Body: body, Digest: "d1"}
	}
	conflict := exchange{Seq: 9, Method: "POST", Path: "/v1/payments", Scope: scope, Fingerprint: fp2, Status: 422, Code: "PAYLOAD_CONFLICT"}
	clean := func() (*snapshot, []exchange) {
		return &snapshot{
			Payments:         []map[string]string{{"id": payments.PaymentID(op), "operation_id": op, "amount": "1.00"}},
			Outbox:           []map[string]string{{"operation_id": op}},
			Operations:       []map[string]string{{"operation_id": op, "operation": payments.OperationCreate, "state": "SUCCEEDED"}},
			ProviderExecuted: -1,
		}, []exchange{created(0, false), created(1, true), conflict}
	}
	snap, hist := clean()
	if bad, _ := checkHistory(hist, snap, allow{}); len(bad) != 0 {
		t.Fatalf("clean history: violations %v", bad)
	}
	for _, c := range []struct {
		name, want string
		spoil      func(*snapshot, []exchange) []exchange
	}{
		{"executed twice", "executed 2 times", func(_ *snapshot, h []exchange) []exchange { return append(h, created(5, false)) }},
		{"replay differs", "differs", func(_ *snapshot, h []exchange) []exchange { h[1].Digest = "d2"; return h }},
		{"false conflict", "false hit", func(_ *snapshot, h []exchange) []exchange { h[2].Fingerprint = fp; return h }},
		{"conflict reveals", "reveals", func(_ *snapshot, h []exchange) []exchange {
			h[2].Header = map[string]string{"Idempotency-Operation": op}
			return h
		}},
		{"other fingerprint replayed", "got the outcome", func(_ *snapshot, h []exchange) []exchange { h[1].Fingerprint = fp2; return h }},
		{"two operations in a scope", "two operations", func(_ *snapshot, h []exchange) []exchange {
			h[1].Header = map[string]string{"Idempotency-Operation": op2, "Idempotent-Replayed": "true"}
			return h
		}},
		{"unexpected 503", "unexpected 503", func(_ *snapshot, h []exchange) []exchange {
			return append(h, exchange{Seq: 7, Method: "POST", Scope: scope, Fingerprint: fp, Status: 503, Code: "STORE_UNAVAILABLE"})
		}},
		{"second payment", "2 payments", func(s *snapshot, h []exchange) []exchange {
			s.Payments = append(s.Payments, map[string]string{"id": "pay_x", "operation_id": op})
			return h
		}},
		{"no outbox row", "0 outbox rows", func(s *snapshot, h []exchange) []exchange { s.Outbox = nil; return h }},
		{"record left in flight", "left RESERVED", func(s *snapshot, h []exchange) []exchange {
			s.Operations = append(s.Operations, map[string]string{"operation_id": op2, "operation": payments.OperationCreate, "state": "RESERVED"})
			return h
		}},
		{"provider ran twice", "an effect ran twice", func(s *snapshot, h []exchange) []exchange { s.ProviderExecuted = 2; return h }},
		{"stored 5xx", "no 5xx is ever stored", func(s *snapshot, h []exchange) []exchange { s.Operations[0]["resp_status"] = "502"; return h }},
		{"settled transfer without its message", "want one transfer.created", func(s *snapshot, h []exchange) []exchange {
			s.Operations = append(s.Operations, map[string]string{"operation_id": op2, "operation": payments.OperationTransfer, "state": "SUCCEEDED"})
			s.Outbox = append(s.Outbox, map[string]string{"operation_id": op2, "topic": payments.TopicTransferSettled})
			return h
		}},
	} {
		snap, hist := clean()
		hist = c.spoil(snap, hist)
		bad, _ := checkHistory(hist, snap, allow{})
		if !strings.Contains(strings.Join(bad, "\n"), c.want) {
			t.Errorf("%s: violations %q; want one mentioning %q", c.name, bad, c.want)
		}
	}
}
