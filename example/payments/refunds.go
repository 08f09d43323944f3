package payments

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/registry"
)

// POST /v1/payments/{id}/refunds (SPEC A8) is the compensation of a
// committed payment: a payment cannot be cancelled by its key, it is
// refunded by a new, idempotent operation with a key of its own.
//
// The operation's scope is the caller's, as for every operation
// (tenant, principal, OperationRefund, API revision, key); the payment id
// is part of the path and so of the fingerprint. A key therefore names
// one refund request of the caller: the same key sent for another
// payment, or with another amount or reason, is 422 PAYLOAD_CONFLICT,
// never a second refund.
//
// Answers, all stored with the operation and replayed to a retry:
//
//   - 201 with Location /v1/payments/{id}/refunds/{refundID} and the
//     Refund, which names the payment and the operation that created it.
//     The refund row, the payment's raised refunded total and the
//     "refund.created" outbox message commit with the outcome.
//   - 404 NOT_FOUND: no payment with that id is visible to the caller
//     (unknown, or another principal's: the answers are the same bytes).
//     Stored as REJECTED (nothing changed): a payment appears under an id only once
//     its creation committed, so send a refund for it with a new key.
//   - 422 REFUND_EXCEEDS_PAYMENT: the refunds of the payment would exceed
//     its amount. Stored as REJECTED (nothing changed).
//   - 422 AMOUNT_LIMIT: the amount is above AmountLimit, as for payments.
//     Stored as REJECTED (nothing changed).
//   - 400 SCHEMA_VIOLATION (and the other refusals of the contract) for a
//     body that breaks refunds.v1; nothing is stored.
//
// The cap holds under concurrency: add_refunded (payments.sql) raises the
// payment's refunded total in one conditional UPDATE whose row lock
// serialises concurrent refunds of one payment.

// Names of the refund operation and its outbox topic.
const (
	// OperationRefund is the idempotent operation of
	// POST /v1/payments/{id}/refunds.
	OperationRefund = "payments.refund"
	// TopicRefundCreated is the outbox topic of a new refund; the message
	// payload is the refund as JSON, as in the 201 response.
	TopicRefundCreated = "refund.created"
	// CodeRefundExceedsPayment (422): the payment's refunds would exceed
	// its amount.
	CodeRefundExceedsPayment idem.Code = "REFUND_EXCEEDS_PAYMENT"
)

// Refund is a refund as the API shows it, in the 201 response, the GET
// routes and the outbox message.
type Refund struct {
	ID string `json:"id"`
	// Payment is the refunded payment's id.
	Payment string `json:"payment"`
	// PaymentOperationID is the operation that created the payment.
	PaymentOperationID string  `json:"payment_operation_id"`
	Amount             string  `json:"amount"`           // decimal at scale 2, "2.50"
	Reason             *string `json:"reason,omitempty"` // omitted when absent
	// CreatedAt is RFC 3339 with nanoseconds, UTC.
	CreatedAt string `json:"created_at"`
}

// RefundList is the body of GET /v1/payments/{id}/refunds.
type RefundList struct {
	Payment string `json:"payment"`
	// Amount is the payment's amount; Refunded the sum of its refunds,
	// never more than Amount.
	Amount   string   `json:"amount"`
	Refunded string   `json:"refunded"`
	Refunds  []Refund `json:"refunds"` // newest first (by refund id: to the millisecond)
}

// RefundID returns the id of the refund created by an operation: "ref_"
// followed by the operation ID without its "op_" prefix.
func RefundID(operationID string) string {
	return "ref_" + strings.TrimPrefix(operationID, "op_")
}

// refundRequest is a canonical refunds.v1 payload.
type refundRequest struct {
	Amount string  `json:"amount"`
	Reason *string `json:"reason"`
}

// refund handles POST /v1/payments/{id}/refunds inside the idempotency
// middleware: it runs once per operation, in the operation's business
// transaction.
func (s *Service) refund(w http.ResponseWriter, r *http.Request) {
	e, ok := s.execution(w, r, "refund", canon.Options{Mode: canon.ModeSchema, Schema: RefundSchema()})
	if !ok {
		return
	}
	ctx := r.Context()
	var req refundRequest
	dec := json.NewDecoder(bytes.NewReader(e.payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.internal(w, r, "refund: canonical payload", err)
		return
	}
	over, err := aboveLimit(req.Amount)
	if err != nil {
		s.internal(w, r, "refund: canonical payload", err)
		return
	}
	if over {
		writeProblem(w, http.StatusUnprocessableEntity, CodeAmountLimit, "amount above "+AmountLimit)
		return
	}
	paymentID := r.PathValue("id")
	if !storable(paymentID) { // names no payment; the store would refuse it
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such payment")
		return
	}
	var paymentOp, paymentAmount string
	err = e.tx.QueryRow(ctx, queries.Get("get_refundable_payment"), paymentID, e.caller.Tenant, e.caller.Principal).
		Scan(&paymentOp, &paymentAmount)
	switch {
	case noRows(err):
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such payment")
		return
	case err != nil:
		s.storeFailed(w, r, "refund: read payment", err)
		return
	}
	amount, err := minorUnits(req.Amount)
	if err != nil {
		s.internal(w, r, "refund: amount", err)
		return
	}
	limit, err := minorUnits(paymentAmount)
	if err != nil {
		s.internal(w, r, "refund: stored payment amount", err)
		return
	}
	n, err := e.tx.Exec(ctx, queries.Get("add_refunded"), paymentID, amount, limit)
	switch {
	case err != nil:
		s.storeFailed(w, r, "refund: refunded total", err)
		return
	case n == 0:
		writeProblem(w, http.StatusUnprocessableEntity, CodeRefundExceedsPayment,
			"the payment's refunds would exceed its amount")
		return
	}
	ref := Refund{
		ID:                 RefundID(e.opID),
		Payment:            paymentID,
		PaymentOperationID: paymentOp,
		Amount:             req.Amount,
		Reason:             req.Reason,
		CreatedAt:          time.Now().UTC().Format(time.RFC3339Nano),
	}
	body, err := marshal(ref)
	if err != nil {
		s.internal(w, r, "refund: encoding", err)
		return
	}
	if _, err := e.tx.Exec(ctx, queries.Get("insert_refund"), ref.ID, e.opID, ref.Payment,
		ref.PaymentOperationID, ref.Amount, ref.Reason, ref.CreatedAt); err != nil {
		s.storeFailed(w, r, "refund: insert", err)
		return
	}
	if err := s.addOutbox(ctx, e.tx, e.opID, TopicRefundCreated, body); err != nil {
		s.internal(w, r, "refund: outbox", err)
		return
	}
	h := w.Header()
	h.Set("Location", "/v1/payments/"+paymentID+"/refunds/"+ref.ID)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// listRefunds handles GET /v1/payments/{id}/refunds: the payment's
// refunds, newest first, with its amount and refunded total, read in one
// statement so they agree; 404 NOT_FOUND unless the caller owns the
// payment.
func (s *Service) listRefunds(w http.ResponseWriter, r *http.Request, id idem.Identity) {
	if !storable(r.PathValue("id")) {
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such payment")
		return
	}
	var (
		l     RefundList
		found bool
	)
	err := s.store.InTx(r.Context(), func(ctx context.Context, tx registry.Tx) error {
		l, found = RefundList{Payment: r.PathValue("id"), Refunds: []Refund{}}, false
		return queryRows(ctx, tx, queries.Get("list_refunds"), []any{l.Payment, id.Tenant, id.Principal},
			func(row registry.Row) error {
				var (
					refunded int64
					ref      refundRow
				)
				if err := row.Scan(&l.Amount, &refunded, &ref.id, &ref.paymentOp, &ref.amount, &ref.reason, &ref.createdAt); err != nil {
					return err
				}
				found, l.Refunded = true, formatMinor(refunded)
				if ref.id.Valid { // a payment without refunds is one row of NULLs
					l.Refunds = append(l.Refunds, ref.refund(l.Payment))
				}
				return nil
			})
	})
	switch {
	case err != nil:
		s.storeFailed(w, r, "list refunds", err)
	case !found:
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such payment")
	default:
		writeJSON(w, http.StatusOK, l)
	}
}

// getRefund handles GET /v1/payments/{id}/refunds/{refundID}: 404
// NOT_FOUND unless the refund is of that payment and the caller owns it.
func (s *Service) getRefund(w http.ResponseWriter, r *http.Request, id idem.Identity) {
	if !storable(r.PathValue("id")) || !storable(r.PathValue("refundID")) {
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such refund")
		return
	}
	var (
		ref   Refund
		found bool
	)
	err := s.store.InTx(r.Context(), func(ctx context.Context, tx registry.Tx) error {
		var reason sql.NullString
		err := tx.QueryRow(ctx, queries.Get("get_refund"), r.PathValue("refundID"), r.PathValue("id"), id.Tenant, id.Principal).
			Scan(&ref.ID, &ref.Payment, &ref.PaymentOperationID, &ref.Amount, &reason, &ref.CreatedAt)
		if noRows(err) {
			return nil
		}
		if reason.Valid {
			ref.Reason = &reason.String
		}
		found = err == nil
		return err
	})
	switch {
	case err != nil:
		s.storeFailed(w, r, "get refund", err)
	case !found:
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such refund")
	default:
		writeJSON(w, http.StatusOK, ref)
	}
}

// refundRow holds the refund columns of a list_refunds row, NULL when the
// payment has no refunds.
type refundRow struct {
	id, paymentOp, amount, reason, createdAt sql.NullString
}

func (r refundRow) refund(paymentID string) Refund {
	ref := Refund{ID: r.id.String, Payment: paymentID, PaymentOperationID: r.paymentOp.String,
		Amount: r.amount.String, CreatedAt: r.createdAt.String}
	if r.reason.Valid {
		ref.Reason = &r.reason.String
	}
	return ref
}

// minorUnits converts a canonical amount no larger than AmountLimit
// ("12.50") to minor units (1250).
func minorUnits(amount string) (int64, error) {
	over, err := aboveLimit(amount) // also checks the canonical form
	switch {
	case err != nil:
		return 0, err
	case over:
		return 0, fmt.Errorf("amount %s above %s", amount, AmountLimit)
	}
	intPart, frac, _ := strings.Cut(amount, ".")
	return strconv.ParseInt(intPart+frac, 10, 64)
}

// formatMinor writes minor units (1250) as a canonical amount ("12.50").
func formatMinor(n int64) string {
	return fmt.Sprintf("%d.%02d", n/100, n%100)
}

// noRows reports whether err is either driver's "no rows".
func noRows(err error) bool {
	return errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows)
}
