package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// POST /v1/transfers (SPEC R, E1–E2) sends the payments.v1 body to the
// downstream provider (Config.Provider) through idemhttp.Effect, with the
// stable downstream key of the operation as the provider's
// Idempotency-Key. The route exists only when Config.Provider is set;
// without a provider it is not registered and answers 404.
//
// Answers:
//
//   - 201 with Location /v1/transfers/{id} and the Transfer: the provider
//     executed the transfer (or had executed it for this key before).
//     Stored as SUCCEEDED and replayed.
//   - 422 AMOUNT_LIMIT, as for payments, before anything is sent; stored
//     as FAILED_FINAL.
//   - 502 DOWNSTREAM_FAILED: the provider answered that it executed
//     nothing (503 PROVIDER_FAILURE, or a 4xx refusing the request). The
//     effect is recorded as failed, and the middleware stores this 502 as
//     FAILED_FINAL because every effect begun failed (idemhttp effect
//     policy): it is replayed, and a new attempt needs a new key.
//   - 409 OUTCOME_UNKNOWN: the provider's answer was lost (client timeout,
//     connection error after sending, a 5xx other than PROVIDER_FAILURE,
//     an unreadable answer, a PAYLOAD_CONFLICT for our key): the operation
//     is UNKNOWN until reconciled, and retries get the same 409 without
//     calling the provider again.
//
// Transfers have no table of their own: the stored response is the record
// of a transfer, and there is no GET /v1/transfers/{id} route yet.

// Names of the transfer operation and its effect.
const (
	// OperationTransfer is the idempotent operation of POST /v1/transfers.
	OperationTransfer = "transfers.create"
	// EffectTransfer names the provider call within the operation.
	EffectTransfer = "provider.transfer"
	// CodeDownstreamFailed (502): the provider executed nothing.
	CodeDownstreamFailed idem.Code = "DOWNSTREAM_FAILED"
	// DefaultProviderTimeout bounds one provider call when
	// Config.ProviderTimeout is 0.
	DefaultProviderTimeout = 5 * time.Second
)

// Transfer is a transfer as the API shows it in the 201 response.
type Transfer struct {
	ID       string `json:"id"`
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	Payee    string `json:"payee"`
	// ProviderTransfer is the provider's id of the transfer (its handle).
	ProviderTransfer string `json:"provider_transfer"`
	CreatedAt        string `json:"created_at"`
}

// TransferID returns the id of the transfer created by an operation: "tr_"
// followed by the operation ID without its "op_" prefix.
func TransferID(operationID string) string {
	return "tr_" + strings.TrimPrefix(operationID, "op_")
}

// transfers calls the provider.
type transfers struct {
	s       *Service
	baseURL string
	client  *http.Client
}

// create handles POST /v1/transfers inside the idempotency middleware, as
// an effect-bearing operation (no business transaction).
func (t *transfers) create(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	opID, payload := idemhttp.OperationID(ctx), idemhttp.Payload(ctx)
	if opID == "" || payload == nil {
		t.s.internal(w, r, "transfer", errors.New("called outside the idempotency middleware"))
		return
	}
	req, over, err := parseCreate(payload)
	if err != nil {
		t.s.internal(w, r, "transfer: canonical payload", err)
		return
	}
	if over {
		idemhttp.WriteProblem(w, idem.CodeAmountLimit, "amount above "+AmountLimit)
		return
	}
	downstream, err := marshal(map[string]string{
		"amount": req.Amount, "currency": req.Currency, "payee": req.Payee, "reference": opID,
	})
	if err != nil {
		t.s.internal(w, r, "transfer: encoding", err)
		return
	}
	handle, err := idemhttp.Effect(ctx, EffectTransfer, func(ctx context.Context, key string) (string, error) {
		return t.send(ctx, key, downstream)
	})
	switch {
	case errors.Is(err, idemhttp.ErrOutcomeUnknown):
		// The middleware answers 409 OUTCOME_UNKNOWN whatever is written.
		t.s.log.WarnContext(ctx, "payments: transfer outcome unknown", "operation_id", opID, "err", err)
		writeProblem(w, http.StatusBadGateway, idem.CodeOutcomeUnknown, "the provider's answer was lost")
		return
	case errors.Is(err, idemhttp.ErrEffectFailed):
		t.s.log.WarnContext(ctx, "payments: transfer refused downstream", "operation_id", opID, "err", err)
		writeProblem(w, http.StatusBadGateway, CodeDownstreamFailed, "the provider executed nothing")
		return
	case err != nil:
		// Effect could not begin (storage, fencing): nothing was sent, the
		// reservation is released and a retry runs afresh.
		t.s.storeFailed(w, r, "transfer: begin effect", err)
		return
	}
	tr := Transfer{
		ID:               TransferID(opID),
		Amount:           req.Amount,
		Currency:         req.Currency,
		Payee:            req.Payee,
		ProviderTransfer: handle,
		CreatedAt:        time.Now().UTC().Format(time.RFC3339Nano),
	}
	body, err := marshal(tr)
	if err != nil {
		t.s.internal(w, r, "transfer: encoding", err)
		return
	}
	h := w.Header()
	h.Set("Location", "/v1/transfers/"+tr.ID)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// send POSTs one transfer to the provider and classifies the answer: the
// provider's transfer id on 201; ErrEffectFailed when the provider says it
// executed nothing; ErrOutcomeUnknown whenever it may have executed.
func (t *transfers) send(ctx context.Context, key string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.baseURL+"/transfers", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("%w: building the request: %v", idemhttp.ErrEffectFailed, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := t.client.Do(req)
	if err != nil {
		// Timeout or connection trouble: the request may have been sent.
		return "", fmt.Errorf("%w: %v", idemhttp.ErrOutcomeUnknown, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("%w: reading the answer: %v", idemhttp.ErrOutcomeUnknown, err)
	}
	var v struct {
		ID   string `json:"id"`
		Code string `json:"code"`
	}
	jerr := json.Unmarshal(data, &v)
	switch {
	case resp.StatusCode == http.StatusCreated && jerr == nil && v.ID != "":
		return v.ID, nil
	case resp.StatusCode == http.StatusServiceUnavailable && jerr == nil && v.Code == "PROVIDER_FAILURE":
		return "", fmt.Errorf("%w: provider failure", idemhttp.ErrEffectFailed)
	case resp.StatusCode >= 400 && resp.StatusCode <= 499 && resp.StatusCode != http.StatusUnprocessableEntity:
		// A refused request executes nothing. 422 PAYLOAD_CONFLICT means
		// the key executed another body: not ours to conclude.
		return "", fmt.Errorf("%w: provider answered %d %s", idemhttp.ErrEffectFailed, resp.StatusCode, v.Code)
	}
	return "", fmt.Errorf("%w: provider answered %d %s", idemhttp.ErrOutcomeUnknown, resp.StatusCode, v.Code)
}
