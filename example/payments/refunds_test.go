package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// refundPost sends POST /v1/payments/{paymentID}/refunds.
func (b *testBundle) refundPost(t *testing.T, token, key, paymentID, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/payments/"+paymentID+"/refunds", token, key, body)
}

// mustRefund posts a refund and requires a first execution's 201.
func (b *testBundle) mustRefund(t *testing.T, token, key, paymentID, body string) (response, Refund) {
	t.Helper()
	r := b.refundPost(t, token, key, paymentID, body)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("refund: %v, replayed %q", r, r.header.Get("Idempotent-Replayed"))
	}
	var ref Refund
	if err := json.Unmarshal(r.body, &ref); err != nil {
		t.Fatal(err)
	}
	return r, ref
}

// refunds reads GET /v1/payments/{paymentID}/refunds as token.
func (b *testBundle) refunds(t *testing.T, token, paymentID string) RefundList {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/payments/"+paymentID+"/refunds", token, "", "")
	var l RefundList
	if err := json.Unmarshal(r.body, &l); r.status != http.StatusOK || err != nil || l.Refunds == nil {
		t.Fatalf("list refunds: %v (%v)", r, err)
	}
	return l
}

// refundTotals reads, from the database, the refunded total of a payment
// and the number and sum (in minor units) of its refund rows.
func refundTotals(t *testing.T, store registry.Store, paymentID string) (refunded int64, rows int, sum int64) {
	t.Helper()
	err := store.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT refunded_minor FROM payments WHERE id = $1", paymentID).Scan(&refunded); err != nil {
			return err
		}
		rows, sum = 0, 0
		return queryRows(ctx, tx, "SELECT amount FROM refunds WHERE payment_id = $1", []any{paymentID},
			func(row registry.Row) error {
				var a string
				if err := row.Scan(&a); err != nil {
					return err
				}
				n, err := minorUnits(a)
				rows, sum = rows+1, sum+n
				return err
			})
	})
	if err != nil {
		t.Fatal(err)
	}
	return refunded, rows, sum
}

// outboxTopics claims every outbox message and counts them by topic;
// byOp maps operation IDs to their messages.
func outboxTopics(t *testing.T, store registry.Store) (topics map[string]int, byOp map[string][]registry.OutboxMessage) {
	t.Helper()
	msgs, err := store.ClaimOutbox(context.Background(), 1000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	topics, byOp = map[string]int{}, map[string][]registry.OutboxMessage{}
	for _, m := range msgs {
		topics[m.Topic]++
		byOp[m.OperationID] = append(byOp[m.OperationID], m)
	}
	return topics, byOp
}

func testRefund(t *testing.T, b *testBundle) {
	pr, p := b.mustCreate(t, "tok-alice", "k-pay", `{"amount":"10","currency":"EUR","payee":"p"}`)
	payOp := pr.header.Get("Idempotency-Operation")
	r, ref := b.mustRefund(t, "tok-alice", "k-ref", p.ID, `{"amount":"2.5","reason":"returned <item> & box"}`)
	op := r.header.Get("Idempotency-Operation")
	if !strings.HasPrefix(op, "op_") || op == payOp || r.header.Get("Idempotency-Contract") != idem.ContractVersion {
		t.Fatalf("contract headers %v (payment operation %s)", r.header, payOp)
	}
	if ref.ID != RefundID(op) || ref.Payment != p.ID || ref.PaymentOperationID != payOp || ref.Amount != "2.50" ||
		ref.Reason == nil || *ref.Reason != "returned <item> & box" || ref.CreatedAt == "" {
		t.Errorf("refund %s; want id %s, payment %s, payment_operation_id %s, amount 2.50", r.body, RefundID(op), p.ID, payOp)
	}
	loc := "/v1/payments/" + p.ID + "/refunds/" + ref.ID
	if got := r.header.Get("Location"); got != loc {
		t.Errorf("Location %q, want %q", got, loc)
	}
	if g := b.do(t, http.MethodGet, loc, "tok-alice", "", ""); g.status != http.StatusOK || !bytes.Equal(g.body, r.body) {
		t.Errorf("GET refund: %v, want the created body %s", g, r.body)
	}
	// A reason is optional; the list shows both refunds and the total.
	// (Newest first holds to the millisecond of the refund ids, which two
	// quick refunds may share, so their order is not checked.)
	r2, ref2 := b.mustRefund(t, "tok-alice", "k-ref-2", p.ID, `{"amount":"0.50","reason":null}`)
	if ref2.Reason != nil || bytes.Contains(r2.body, []byte("reason")) {
		t.Errorf("absent reason shown: %s", r2.body)
	}
	l := b.refunds(t, "tok-alice", p.ID)
	if len(l.Refunds) == 2 && l.Refunds[0].ID == ref.ID {
		l.Refunds[0], l.Refunds[1] = l.Refunds[1], l.Refunds[0]
	}
	if l.Payment != p.ID || l.Amount != "10.00" || l.Refunded != "3.00" || len(l.Refunds) != 2 ||
		l.Refunds[0] != ref2 || l.Refunds[1].ID != ref.ID || *l.Refunds[1].Reason != *ref.Reason {
		t.Errorf("refund list %+v", l)
	}
	if refunded, rows, sum := refundTotals(t, b.store, p.ID); refunded != 300 || rows != 2 || sum != 300 {
		t.Errorf("database: refunded %d, %d rows summing to %d; want 300, 2, 300", refunded, rows, sum)
	}
	// The operation is the refund's; the payment is unchanged.
	o := b.do(t, http.MethodGet, "/v1/operations/"+op, "tok-alice", "", "")
	if o.status != http.StatusOK || !strings.Contains(string(o.body), `"operation":"`+OperationRefund+`"`) ||
		!strings.Contains(string(o.body), `"resource":"`+loc+`"`) {
		t.Errorf("GET operation: %v", o)
	}
	if g := b.do(t, http.MethodGet, "/v1/payments/"+p.ID, "tok-alice", "", ""); !bytes.Equal(g.body, pr.body) {
		t.Errorf("payment after refunds %s, created as %s", g.body, pr.body)
	}
	// One refund.created message per refund, its payload the 201 body,
	// committed with the refund's operation.
	topics, byOp := outboxTopics(t, b.store)
	if topics[TopicCreated] != 1 || topics[TopicRefundCreated] != 2 {
		t.Errorf("outbox topics %v", topics)
	}
	if ms := byOp[op]; len(ms) != 1 || ms[0].Topic != TopicRefundCreated || ms[0].ID != registry.MessageID(op, 0) ||
		!bytes.Equal(ms[0].Payload, r.body) {
		t.Errorf("outbox of the refund operation: %+v", ms)
	}
}

func testRefundReplay(t *testing.T, b *testBundle) {
	_, p := b.mustCreate(t, "tok-alice", "k-pay", `{"amount":"10","currency":"EUR","payee":"p"}`)
	_, q := b.mustCreate(t, "tok-alice", "k-pay-2", `{"amount":"10","currency":"EUR","payee":"p"}`)
	first, _ := b.mustRefund(t, "tok-alice", "k-ref", p.ID, `{"amount":"4.00","reason":"r"}`)
	for name, again := range map[string]string{
		"identical":    `{"amount":"4.00","reason":"r"}`,
		"scale":        `{"amount":"4","reason":"r"}`,
		"member order": `{"reason":"r","amount":"4.0"}`,
	} {
		t.Run(name, func(t *testing.T) {
			requireReplay(t, first, b.refundPost(t, "tok-alice", "k-ref", p.ID, again))
		})
	}
	// The same key with another amount or reason, or for another
	// payment, is another request: a conflict, never a second refund.
	for _, c := range []struct{ payment, body string }{
		{p.ID, `{"amount":"4.01","reason":"r"}`},
		{p.ID, `{"amount":"4.00"}`},
		{q.ID, `{"amount":"4.00","reason":"r"}`},
	} {
		r := b.refundPost(t, "tok-alice", "k-ref", c.payment, c.body)
		requireProblem(t, r, http.StatusUnprocessableEntity, idem.CodePayloadConflict)
		if bytes.Contains(r.body, []byte("ref_")) || bytes.Contains(r.body, []byte("4.00")) {
			t.Errorf("conflict reveals the first request or response: %s", r.body)
		}
	}
	// The same key on another route is another operation's scope.
	b.mustCreate(t, "tok-alice", "k-ref", `{"amount":"1","currency":"EUR","payee":"p"}`)
	if refunded, rows, _ := refundTotals(t, b.store, p.ID); refunded != 400 || rows != 1 {
		t.Errorf("refunded %d in %d rows, want 400 in 1", refunded, rows)
	}
	if refunded, rows, _ := refundTotals(t, b.store, q.ID); refunded != 0 || rows != 0 {
		t.Errorf("the other payment: refunded %d in %d rows, want none", refunded, rows)
	}
}

func testRefundCap(t *testing.T, b *testBundle) {
	_, p := b.mustCreate(t, "tok-alice", "k-pay", `{"amount":"10","currency":"EUR","payee":"p"}`)
	b.mustRefund(t, "tok-alice", "k1", p.ID, `{"amount":"6"}`)
	over := b.refundPost(t, "tok-alice", "k2", p.ID, `{"amount":"4.01"}`)
	requireProblem(t, over, http.StatusUnprocessableEntity, CodeRefundExceedsPayment)
	// The refusal is stored and replayed.
	requireReplay(t, over, b.refundPost(t, "tok-alice", "k2", p.ID, `{ "amount": "4.01" }`))
	o := b.do(t, http.MethodGet, "/v1/operations/"+over.header.Get("Idempotency-Operation"), "tok-alice", "", "")
	if !strings.Contains(string(o.body), `"state":"REJECTED"`) { // refused, nothing changed
		t.Errorf("operation of a refused refund: %v", o)
	}
	// The longest reason, in characters.
	b.mustRefund(t, "tok-alice", "k3", p.ID, `{"amount":"0.01","reason":"`+strings.Repeat("é", RefundMaxReason)+`"}`)
	b.mustRefund(t, "tok-alice", "k4", p.ID, `{"amount":"3.99"}`) // exactly the rest
	requireProblem(t, b.refundPost(t, "tok-alice", "k5", p.ID, `{"amount":"0.01"}`),
		http.StatusUnprocessableEntity, CodeRefundExceedsPayment)
	// Amounts follow the payments' rules.
	limit := b.refundPost(t, "tok-alice", "k6", p.ID, `{"amount":"1000000.01"}`)
	requireProblem(t, limit, http.StatusUnprocessableEntity, CodeAmountLimit)
	requireReplay(t, limit, b.refundPost(t, "tok-alice", "k6", p.ID, `{"amount":"1000000.01"}`)) // stored, replayed
	for _, body := range []string{
		`{"amount":"0.00"}`, `{"amount":"-1"}`, `{"amount":"1.005"}`, `{"amount":1}`, `{}`,
		`{"amount":"1","currency":"EUR"}`, `{"amount":"1","reason":"` + strings.Repeat("x", RefundMaxReason+1) + `"}`,
	} {
		requireProblem(t, b.refundPost(t, "tok-alice", "k7", p.ID, body), http.StatusBadRequest, idem.CodeSchemaViolation)
	}
	if refunded, rows, sum := refundTotals(t, b.store, p.ID); refunded != 1000 || rows != 3 || sum != 1000 {
		t.Errorf("database: refunded %d, %d rows summing to %d; want 1000, 3, 1000", refunded, rows, sum)
	}
	if l := b.refunds(t, "tok-alice", p.ID); l.Refunded != "10.00" || len(l.Refunds) != 3 {
		t.Errorf("refund list: refunded %s, %d refunds; want 10.00, 3", l.Refunded, len(l.Refunds))
	}
}

func testRefundOwnership(t *testing.T, b *testBundle) {
	_, p := b.mustCreate(t, "tok-alice", "k-pay", `{"amount":"10","currency":"EUR","payee":"p"}`)
	_, ref := b.mustRefund(t, "tok-alice", "same-key", p.ID, `{"amount":"1"}`)
	// Refunding an unknown payment and another principal's (same tenant,
	// or the same principal name in another tenant) answer the same bytes.
	unknown := b.refundPost(t, "tok-alice", "k-unknown", "pay_nope", `{"amount":"1"}`)
	requireProblem(t, unknown, http.StatusNotFound, CodeNotFound)
	for _, tok := range []string{"tok-bob", "tok-eve"} {
		r := b.refundPost(t, tok, "k-steal", p.ID, `{"amount":"1"}`)
		requireProblem(t, r, http.StatusNotFound, CodeNotFound)
		if !bytes.Equal(r.body, unknown.body) {
			t.Errorf("%s: %s; an unknown payment's answer is %s", tok, r.body, unknown.body)
		}
		// Stored: a retry replays it.
		requireReplay(t, r, b.refundPost(t, tok, "k-steal", p.ID, `{"amount":"1"}`))
		requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/"+p.ID+"/refunds", tok, "", ""), http.StatusNotFound, CodeNotFound)
		requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/"+p.ID+"/refunds/"+ref.ID, tok, "", ""), http.StatusNotFound, CodeNotFound)
		// The key alice used is another scope for them: their own
		// payment's refund is a new operation.
		_, own := b.mustCreate(t, tok, "k-pay", `{"amount":"10","currency":"EUR","payee":"p"}`)
		if _, r := b.mustRefund(t, tok, "same-key", own.ID, `{"amount":"1"}`); r.ID == ref.ID || r.Payment != own.ID {
			t.Errorf("%s's refund %+v hit alice's %+v", tok, r, ref)
		}
	}
	requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/pay_nope/refunds", "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/payments/"+p.ID+"/refunds/ref_nope", "tok-alice", "", ""), http.StatusNotFound, CodeNotFound)
	for _, path := range []string{"/v1/payments/" + p.ID + "/refunds", "/v1/payments/" + p.ID + "/refunds/" + ref.ID} {
		requireProblem(t, b.do(t, http.MethodGet, path, "", "", ""), http.StatusUnauthorized, idem.CodeUnauthenticated)
	}
	requireProblem(t, b.refundPost(t, "", "k-anon", p.ID, `{"amount":"1"}`), http.StatusUnauthorized, idem.CodeUnauthenticated)
	if refunded, rows, _ := refundTotals(t, b.store, p.ID); refunded != 100 || rows != 1 {
		t.Errorf("alice's payment: refunded %d in %d rows, want 100 in 1", refunded, rows)
	}
}

// testConcurrentRefunds sends 20 refunds of 1.00 with 20 different keys at
// once for a payment of 10.00, records every answer, and checks over that
// history and the database that exactly 10 succeeded, the other 10 were
// refused with REFUND_EXCEEDS_PAYMENT, the totals agree, every refund has
// one outbox message, and a retry of each key replays its answer.
func testConcurrentRefunds(t *testing.T, b *testBundle) {
	const n, fits = 20, 10
	_, p := b.mustCreate(t, "tok-alice", "k-pay", `{"amount":"10.00","currency":"EUR","payee":"p"}`)
	key := func(i int) string { return "k-refund-" + strconv.Itoa(i) }
	answers := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = b.refundPost(t, "tok-alice", key(i), p.ID, `{"amount":"1.00"}`)
		})
	}
	close(start)
	wg.Wait()

	created, refused := 0, 0
	ops := map[string]bool{}
	for i, a := range answers {
		switch {
		case a.status == http.StatusCreated && a.header.Get("Idempotent-Replayed") == "":
			created++
			ops[a.header.Get("Idempotency-Operation")] = true
		case a.status == http.StatusUnprocessableEntity && a.code() == CodeRefundExceedsPayment:
			refused++
		default:
			t.Errorf("answer %d (key %s): %v", i, key(i), a)
		}
	}
	if created != fits || refused != n-fits {
		t.Errorf("%d refunds created and %d refused, want %d and %d", created, refused, fits, n-fits)
	}
	if refunded, rows, sum := refundTotals(t, b.store, p.ID); refunded != 1000 || rows != fits || sum != 1000 {
		t.Errorf("database: refunded %d, %d rows summing to %d; want 1000, %d, 1000", refunded, rows, sum, fits)
	}
	if l := b.refunds(t, "tok-alice", p.ID); l.Refunded != "10.00" || len(l.Refunds) != fits {
		t.Errorf("refund list: refunded %s, %d refunds; want 10.00, %d", l.Refunded, len(l.Refunds), fits)
	}
	topics, byOp := outboxTopics(t, b.store)
	if topics[TopicRefundCreated] != fits {
		t.Errorf("%d refund.created messages, want %d", topics[TopicRefundCreated], fits)
	}
	for op := range ops {
		if len(byOp[op]) != 1 {
			t.Errorf("operation %s has %d outbox messages, want 1", op, len(byOp[op]))
		}
	}
	for i, a := range answers {
		requireReplay(t, a, b.refundPost(t, "tok-alice", key(i), p.ID, `{"amount":"1"}`))
	}
}

// TestRefundsOnOldTable starts the service on a database whose payments
// table predates refunds (no refunded_minor column) and holds a payment:
// New adds the column, twice without harm, and the old payment can be
// refunded up to its amount. Not on MySQL: the service's MySQL tables
// came with refunds, so none predates them (create_payments_mysql).
func TestRefundsOnOldTable(t *testing.T) {
	t.Parallel()
	for name, dsn := range testDrivers {
		if name == "MySQL" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, err := idemstore.Open(ctx, dsn(t), idemstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(store.Close)
			err = store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
				if _, err := tx.Exec(ctx, `CREATE TABLE payments (id TEXT PRIMARY KEY, operation_id TEXT NOT NULL UNIQUE,
					tenant TEXT NOT NULL, principal TEXT NOT NULL, amount TEXT NOT NULL, currency TEXT NOT NULL,
					payee TEXT NOT NULL, memo TEXT, created_at TEXT NOT NULL)`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO payments VALUES ('pay_old', 'op_old', 'acme', 'alice', '5.00', 'EUR', 'p', NULL, '2026-01-01T00:00:00Z')`)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := New(ctx, Config{Store: store, Auth: testTokens, Logger: slog.New(slog.DiscardHandler)}); err != nil {
					t.Fatal(err)
				}
			}
			svc, err := New(ctx, Config{Store: store, Auth: testTokens, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(svc.Handler())
			t.Cleanup(srv.Close)
			b := &testBundle{store: store, srv: srv}
			_, ref := b.mustRefund(t, "tok-alice", "k1", "pay_old", `{"amount":"5"}`)
			if ref.PaymentOperationID != "op_old" {
				t.Errorf("refund %+v, want payment_operation_id op_old", ref)
			}
			requireProblem(t, b.refundPost(t, "tok-alice", "k2", "pay_old", `{"amount":"0.01"}`),
				http.StatusUnprocessableEntity, CodeRefundExceedsPayment)
		})
	}
}

// TestRefundDraining: while the registry drains, a new refund is refused
// with 503 DRAINING like a new payment, and a refund's retry is still
// replayed (SPEC E6).
func TestRefundDraining(t *testing.T) {
	t.Parallel()
	for name, dsn := range testDrivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A control row read is used for a nanosecond: the drain is
			// seen by the next request, without waiting.
			b := setupConfig(t, dsn(t), Config{AdmitRefresh: time.Nanosecond})
			_, p := b.mustCreate(t, "tok-alice", "k-pay", `{"amount":"10","currency":"EUR","payee":"p"}`)
			first, _ := b.mustRefund(t, "tok-alice", "k1", p.ID, `{"amount":"1"}`)
			if err := b.store.SetDraining(context.Background(), true); err != nil {
				t.Fatal(err)
			}
			requireProblem(t, b.refundPost(t, "tok-alice", "k2", p.ID, `{"amount":"1"}`), http.StatusServiceUnavailable, idem.CodeDraining)
			requireReplay(t, first, b.refundPost(t, "tok-alice", "k1", p.ID, `{"amount":"1"}`))
			if refunded, rows, _ := refundTotals(t, b.store, p.ID); refunded != 100 || rows != 1 {
				t.Errorf("refunded %d in %d rows, want 100 in 1", refunded, rows)
			}
		})
	}
}
