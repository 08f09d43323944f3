package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// Payment is a payment as the API shows it, in the 201 response, the
// GET routes and the outbox message.
type Payment struct {
	ID       string  `json:"id"`
	Amount   string  `json:"amount"` // decimal at scale 2, "12.50"
	Currency string  `json:"currency"`
	Payee    string  `json:"payee"`
	Memo     *string `json:"memo,omitempty"` // omitted when absent
	// CreatedAt is RFC 3339 with nanoseconds, UTC.
	CreatedAt string `json:"created_at"`
}

// createRequest is a canonical payments.v1 payload.
type createRequest struct {
	Amount   string  `json:"amount"`
	Currency string  `json:"currency"`
	Payee    string  `json:"payee"`
	Memo     *string `json:"memo"`
}

// parseCreate decodes a canonical payments.v1 payload (as idemhttp.Payload
// or canon.Canonicalize gives it) and reports whether its amount is above
// AmountLimit. An error means the payload is not canonical: a defect of
// the service, never of the client.
func parseCreate(payload []byte) (req createRequest, over bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return createRequest{}, false, err
	}
	over, err = aboveLimit(req.Amount)
	return req, over, err
}

// CodeAmountLimit (422): the amount is above AmountLimit; a business
// refusal of this service, stored as REJECTED and replayed.
const CodeAmountLimit idem.Code = "AMOUNT_LIMIT"

// AmountLimit is the largest amount a payment may have; a larger one is
// refused with 422 AMOUNT_LIMIT, stored as REJECTED and replayed.
const AmountLimit = "1000000.00"

// create handles POST /v1/payments inside the idempotency middleware: it
// runs once per operation, in the operation's business transaction.
func (s *Service) create(w http.ResponseWriter, r *http.Request) {
	e, ok := s.execution(w, r, "create", canon.Options{Mode: canon.ModeSchema, Schema: Schema()})
	if !ok {
		return
	}
	ctx, tx, opID, id := r.Context(), e.tx, e.opID, e.caller
	req, over, err := parseCreate(e.payload)
	if err != nil {
		s.internal(w, r, "create: canonical payload", err)
		return
	}
	if over {
		writeProblem(w, http.StatusUnprocessableEntity, CodeAmountLimit, "amount above "+AmountLimit)
		return
	}
	p := newPayment(opID, req)
	body, err := marshal(p)
	if err != nil {
		s.internal(w, r, "create: encoding", err)
		return
	}
	if err := insertPayment(ctx, tx, id, opID, p); err != nil {
		// The middleware rolls back and releases the reservation: a
		// retry runs afresh.
		s.storeFailed(w, r, "create: insert", err)
		return
	}
	if err := s.addOutbox(ctx, tx, opID, TopicCreated, body); err != nil {
		s.internal(w, r, "create: outbox", err)
		return
	}
	h := w.Header()
	h.Set("Location", "/v1/payments/"+p.ID)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// execution is what the idempotency middleware hands a handler of one of
// the service's operations.
type execution struct {
	tx      registry.Tx   // the business transaction
	opID    string        // the operation ID
	payload []byte        // the canonical payload
	caller  idem.Identity // the authenticated caller
}

// execution returns the request's execution. A request executed
// without a record — its operation off, or in shadow where enforce would
// have refused or answered it from a record (idemhttp's plain path) —
// gets a fresh operation ID of the same form if the middleware gave
// none, as PlainCreate does, naming its rows; and, when the middleware
// canonicalised nothing,
// its body is read and checked here against opts (the operation's
// binding) with the problems the middleware would answer (413, 415, 400),
// and its caller authenticated (401). Outside the middleware (no
// transaction: a defect of the service) it answers 500 INTERNAL. When it
// returns false the answer is written.
func (s *Service) execution(w http.ResponseWriter, r *http.Request, what string, opts canon.Options) (execution, bool) {
	ctx := r.Context()
	e := execution{tx: idemhttp.Tx(ctx), opID: idemhttp.OperationID(ctx), payload: idemhttp.Payload(ctx)}
	if e.tx == nil {
		s.internal(w, r, what, errors.New("called outside the idempotency middleware"))
		return execution{}, false
	}
	var ok bool
	if e.caller, ok = idemhttp.Caller(ctx); !ok { // off and shadow's plain path may hand no identity down
		var err error
		if e.caller, err = s.identity(r); err != nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			idemhttp.WriteProblem(w, idem.CodeUnauthenticated, "authentication required")
			return execution{}, false
		}
	}
	if e.payload == nil {
		body, rerr := readPlainBody(r)
		if rerr != nil {
			idemhttp.WriteProblem(w, idem.Code(rerr.Code), rerr.Reason)
			return execution{}, false
		}
		res, err := canon.Canonicalize(r.Header.Get("Content-Type"), body, opts)
		if err != nil {
			detail := "invalid request"
			if ce, ok := err.(*canon.Error); ok {
				detail = ce.Reason
				if ce.Offset >= 0 {
					detail += " at byte " + strconv.Itoa(ce.Offset)
				}
			}
			idemhttp.WriteProblem(w, idem.CodeOf(err), detail)
			return execution{}, false
		}
		e.payload = res.Payload
	}
	if e.opID == "" {
		e.opID = idem.NewOperationID(time.Now(), idem.ScopeHash{})
	}
	return e, true
}

// newPayment is the payment an operation (or a plain request) with that
// ID creates from req, created now.
func newPayment(operationID string, req createRequest) Payment {
	return Payment{
		ID:        PaymentID(operationID),
		Amount:    req.Amount,
		Currency:  req.Currency,
		Payee:     req.Payee,
		Memo:      req.Memo,
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano),
	}
}

// insertPayment writes the payment row of p, created by operation (or
// plain request) operationID for the caller id, in tx.
func insertPayment(ctx context.Context, tx registry.Tx, id idem.Identity, operationID string, p Payment) error {
	_, err := tx.Exec(ctx, queries.Get("insert_payment"), p.ID, operationID, id.Tenant, id.Principal,
		p.Amount, p.Currency, p.Payee, p.Memo, p.CreatedAt)
	return err
}

// PaymentID returns the id of the payment created by an operation:
// "pay_" followed by the operation ID without its "op_" prefix.
func PaymentID(operationID string) string {
	return "pay_" + strings.TrimPrefix(operationID, "op_")
}

// aboveLimit reports whether a canonical amount (digits, a point, exactly
// two fraction digits, no leading zero) exceeds AmountLimit. Without
// leading zeros, a longer number is larger, and equal lengths compare
// lexically.
func aboveLimit(amount string) (bool, error) {
	intPart, frac, ok := strings.Cut(amount, ".")
	if !ok || len(frac) != 2 || intPart == "" || (len(intPart) > 1 && intPart[0] == '0') ||
		!digits(intPart) || !digits(frac) {
		return false, fmt.Errorf("amount %q is not at scale 2", amount)
	}
	a, limit := intPart+frac, strings.Replace(AmountLimit, ".", "", 1)
	if len(a) != len(limit) {
		return len(a) > len(limit), nil
	}
	return a > limit, nil
}

func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
