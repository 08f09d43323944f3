package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
)

// refund sends POST /v1/payments/{paymentID}/refunds with key.
func (s *server) refund(t *testing.T, token, key, paymentID, body string) reply {
	t.Helper()
	path := "/v1/payments/" + paymentID + "/refunds"
	r, err := s.send(http.MethodPost, path, token, postHeader(key), body)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return r
}

// TestRefund: through the real binary, a payment is compensated by
// refunds with keys of their own (SPEC A8). A refund's retry replays it
// byte for byte, another amount under its key conflicts, refunds stop at
// the payment's amount with a stored refusal, each refund commits one
// outbox message, and the payment's own key still replays the payment.
func TestRefund(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn)
		pay := s.post(t, "demo", "k-pay", `{"amount":"10.00","currency":"EUR","payee":"acct_1"}`)
		payOp := wantCreated(t, "POST payment", pay)
		pid, _ := payment(t, "POST payment", pay.body)["id"].(string)

		first := s.refund(t, "demo", "k-refund-1", pid, `{"amount":"4.00","reason":"returned"}`)
		op := wantCreated(t, "first refund", first)
		var ref struct {
			Payment            string `json:"payment"`
			PaymentOperationID string `json:"payment_operation_id"`
			Amount             string `json:"amount"`
		}
		if err := json.Unmarshal(first.body, &ref); err != nil || ref.Payment != pid || ref.PaymentOperationID != payOp || ref.Amount != "4.00" {
			t.Errorf("refund %s (%v); want payment %s, payment_operation_id %s, amount 4.00", first.body, err, pid, payOp)
		}
		wantReplay(t, "refund retry", first, s.refund(t, "demo", "k-refund-1", pid, `{"reason":"returned","amount":"4"}`))
		wantProblem(t, "refund key with another amount", s.refund(t, "demo", "k-refund-1", pid, `{"amount":"5.00","reason":"returned"}`),
			http.StatusUnprocessableEntity, "PAYLOAD_CONFLICT")

		over := s.refund(t, "demo", "k-refund-2", pid, `{"amount":"6.01"}`)
		wantProblem(t, "refund beyond the payment", over, http.StatusUnprocessableEntity, "REFUND_EXCEEDS_PAYMENT")
		wantReplay(t, "retry of the refused refund", over, s.refund(t, "demo", "k-refund-2", pid, `{"amount":"6.01"}`))
		rest := s.refund(t, "demo", "k-refund-3", pid, `{"amount":"6.00"}`)
		wantCreated(t, "refund of the rest", rest)

		var list struct {
			Refunded string            `json:"refunded"`
			Refunds  []json.RawMessage `json:"refunds"`
		}
		l := s.get(t, "demo", "/v1/payments/"+pid+"/refunds")
		if err := json.Unmarshal(l.body, &list); l.status != http.StatusOK || err != nil || list.Refunded != "10.00" || len(list.Refunds) != 2 {
			t.Errorf("GET refunds: %v (%v); want refunded 10.00 and 2 refunds", l, err)
		}
		if c := countRows(t, dsn, op); c.Payments != 0 || c.Outbox != 1 || c.AllPayments != 1 || c.AllOutbox != 3 {
			t.Errorf("rows: %+v; want the refund's one outbox message, one payment, three messages in all", c)
		}
		// The payment's key never cancels: it replays the payment.
		wantReplay(t, "payment retry after refunds", pay, s.post(t, "demo", "k-pay", `{"amount":"10","currency":"EUR","payee":"acct_1"}`))
	})
}
