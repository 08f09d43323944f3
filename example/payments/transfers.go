package payments

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// POST /v1/transfers (SPEC R, E1–E2) sends the payments.v1 body to the
// downstream provider (Config.Provider) through idemhttp.Effect, with the
// stable downstream key of the operation as the provider's
// Idempotency-Key. The route exists only when Config.Provider is set;
// without a provider it is not registered and answers 404.
//
// An outcome is recorded only on evidence (package effect, ProviderClient):
//
//   - 201 with Location /v1/transfers/{id} and the Transfer: the provider
//     executed the transfer (for this key, now or before). Stored as
//     SUCCEEDED and replayed.
//   - 422 TRANSFER_DECLINED: the provider declined the key for good
//     (its 422 DECLINED); nothing was transferred. Stored as FAILED_FINAL
//     and replayed; a new attempt needs a new key.
//   - 422 AMOUNT_LIMIT, as for payments, before anything is sent; stored
//     as REJECTED.
//   - 409 OUTCOME_UNKNOWN: the provider's answer proves nothing (timeout,
//     reset, 5xx such as 503 PROVIDER_FAILURE — the provider may have
//     executed the key before failing —, 422 PAYLOAD_CONFLICT, an
//     unreadable answer). Nothing is stored; a retry with the same key, or
//     the recovery worker meanwhile, settles the transfer by asking the
//     provider about the key and re-sending the same request with it.
//
// However a transfer is settled — by its first call, a retry, the recovery
// worker or an operator — its response is RenderTransfer's, from the
// stored request and the provider's answer: a retry after a reconciliation
// gets the same 201 and body shape as after an uninterrupted run.
//
// Transfers have no table of their own: the stored response is the record
// of a transfer (GET /v1/transfers/{id}, transfer_read.go).

// Names of the transfer operation and its effect.
const (
	// OperationTransfer is the idempotent operation of POST /v1/transfers.
	OperationTransfer = "transfers.create"
	// EffectTransfer names the provider call within the operation.
	EffectTransfer = "provider.transfer"
	// CodeTransferDeclined (422): the provider declined the transfer for
	// good; nothing was transferred.
	CodeTransferDeclined idem.Code = "TRANSFER_DECLINED"
	// DefaultProviderTimeout bounds one provider call when
	// Config.ProviderTimeout is 0.
	DefaultProviderTimeout = 5 * time.Second
)

// Outbox topics of transfers.
const (
	// TopicTransferCreated: a transfer was executed (payload: the Transfer
	// with its operation ID).
	TopicTransferCreated = "transfer.created"
	// TopicTransferDeclined: the provider declined a transfer.
	TopicTransferDeclined = "transfer.declined"
	// TopicTransferSettled: a transfer whose outcome was unknown was
	// settled by reconciliation (payload: operation ID, state).
	TopicTransferSettled = "transfer.settled"
)

// Transfer is a transfer as the API shows it in the 201 response.
type Transfer struct {
	ID       string `json:"id"`
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	Payee    string `json:"payee"`
	// ProviderTransfer is the provider's id of the transfer (its handle).
	ProviderTransfer string `json:"provider_transfer"`
	// CreatedAt is when the provider executed it, as the provider said.
	CreatedAt string `json:"created_at"`
}

// TransferID returns the id of the transfer created by an operation: "tr_"
// followed by the operation ID without its "op_" prefix.
func TransferID(operationID string) string {
	return "tr_" + strings.TrimPrefix(operationID, "op_")
}

// providerRequest is the body sent to the provider, stored with the
// effect attempt.
type providerRequest struct {
	Amount    string `json:"amount"`
	Currency  string `json:"currency"`
	Payee     string `json:"payee"`
	Reference string `json:"reference"`
}

// TransferEffects returns the effects of the transfer operation with the
// provider at baseURL, each call bounded by timeout (0 means
// DefaultProviderTimeout): what idemhttp and the recovery worker need to
// send, settle and render transfers.
func TransferEffects(baseURL string, timeout time.Duration) *effect.Operation {
	client := &ProviderClient{BaseURL: baseURL, Client: &http.Client{Timeout: cmp.Or(timeout, DefaultProviderTimeout)}}
	return &effect.Operation{
		Downstreams: map[string]effect.Downstream{EffectTransfer: client},
		Render:      RenderTransfer,
	}
}

// Effects returns the effects of every operation of the service that has
// any, by operation name (none without Config.Provider), for the recovery
// worker and the operator's command.
func (s *Service) Effects() effect.Set { return s.effects }

// RenderTransfer renders the outcome of a transfer from its settled
// provider effect (effect.Renderer): 201 with the Transfer and the
// "transfer.created" message when the provider executed it; 422
// TRANSFER_DECLINED and "transfer.declined" when it declined. A transfer
// settled by reconciliation (rec UNKNOWN) also gets "transfer.settled".
func RenderTransfer(rec registry.Record, effs []registry.Effect) (registry.Outcome, error) {
	var eff *registry.Effect
	for i := range effs {
		if effs[i].Name == EffectTransfer {
			eff = &effs[i]
		}
	}
	if eff == nil {
		return registry.Outcome{}, fmt.Errorf("payments: transfer %s has no %s effect", rec.OperationID, EffectTransfer)
	}
	var req providerRequest
	if err := json.Unmarshal(eff.Request, &req); err != nil {
		return registry.Outcome{}, fmt.Errorf("payments: transfer %s: stored request: %w", rec.OperationID, err)
	}
	var out registry.Outcome
	switch eff.Result {
	case registry.EffectSucceeded:
		var ans struct {
			ID        string `json:"id"`
			CreatedAt string `json:"created_at"`
		}
		if eff.Answer != nil {
			if err := json.Unmarshal(eff.Answer, &ans); err != nil {
				return registry.Outcome{}, fmt.Errorf("payments: transfer %s: stored answer: %w", rec.OperationID, err)
			}
		}
		tr := Transfer{
			ID: TransferID(rec.OperationID), Amount: req.Amount, Currency: req.Currency, Payee: req.Payee,
			ProviderTransfer: cmp.Or(ans.ID, eff.Handle),
			// An operator's settlement has no answer: the time it was settled.
			CreatedAt: cmp.Or(ans.CreatedAt, eff.UpdatedAt.UTC().Format(time.RFC3339Nano)),
		}
		body, err := marshal(tr)
		if err != nil {
			return registry.Outcome{}, err
		}
		msg, err := marshal(struct {
			Transfer
			OperationID string `json:"operation_id"`
		}{tr, rec.OperationID})
		if err != nil {
			return registry.Outcome{}, err
		}
		out = registry.Outcome{
			State:    idem.StateSucceeded,
			Response: idem.Response{Status: http.StatusCreated, MediaType: "application/json", Location: "/v1/transfers/" + tr.ID, Body: body},
			Outbox:   []registry.Message{{Topic: TopicTransferCreated, Payload: msg}},
		}
	case registry.EffectFailed:
		status, body := idemhttp.Problem{Status: http.StatusUnprocessableEntity, Code: CodeTransferDeclined,
			Detail: "the provider declined the transfer; nothing was transferred"}.Marshal()
		msg, err := marshal(map[string]string{"operation_id": rec.OperationID, "payee": req.Payee, "amount": req.Amount, "currency": req.Currency})
		if err != nil {
			return registry.Outcome{}, err
		}
		out = registry.Outcome{
			State:    idem.StateFailedFinal,
			Response: idem.Response{Status: status, MediaType: "application/problem+json", Body: body},
			Outbox:   []registry.Message{{Topic: TopicTransferDeclined, Payload: msg}},
		}
	default:
		return registry.Outcome{}, fmt.Errorf("payments: transfer %s: effect not settled", rec.OperationID)
	}
	if rec.State == idem.StateUnknown {
		msg, err := marshal(map[string]string{"operation_id": rec.OperationID, "state": string(out.State)})
		if err != nil {
			return registry.Outcome{}, err
		}
		out.Outbox = append(out.Outbox, registry.Message{Topic: TopicTransferSettled, Payload: msg})
	}
	return out, nil
}

// createTransfer handles POST /v1/transfers inside the idempotency
// middleware, as an effect-bearing operation (no business transaction):
// it checks the request and makes the provider call; the middleware
// answers with RenderTransfer's outcome once the call is settled.
func (s *Service) createTransfer(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	opID, payload := idemhttp.OperationID(ctx), idemhttp.Payload(ctx)
	if idemhttp.Tx(ctx) != nil {
		// A plain business transaction: the operation is off (by
		// force), so there is no record. A transfer calls the provider
		// under the downstream key its record holds; without one there
		// is no such key, and a re-send could pay twice. It is not
		// served. (Under the contract an effect-bearing operation runs
		// with no business transaction.)
		idemhttp.WriteProblem(w, idemhttp.CodeReadOnly, "transfers cannot be made without idempotency: turn transfers.create to shadow or enforce (idem rollout)")
		return
	}
	if opID == "" || payload == nil {
		s.internal(w, r, "transfer", errors.New("called outside the idempotency middleware"))
		return
	}
	req, over, err := parseCreate(payload)
	if err != nil {
		s.internal(w, r, "transfer: canonical payload", err)
		return
	}
	if over {
		writeProblem(w, http.StatusUnprocessableEntity, CodeAmountLimit, "amount above "+AmountLimit)
		return
	}
	downstream, err := marshal(providerRequest{Amount: req.Amount, Currency: req.Currency, Payee: req.Payee, Reference: opID})
	if err != nil {
		s.internal(w, r, "transfer: encoding", err)
		return
	}
	_, err = idemhttp.Effect(ctx, EffectTransfer, downstream)
	switch {
	case err == nil, errors.Is(err, idemhttp.ErrEffectDeclined):
		// Settled: the middleware answers with the rendered outcome.
	case errors.Is(err, idemhttp.ErrOutcomeUnknown):
		// The middleware answers 409 OUTCOME_UNKNOWN.
		s.log.WarnContext(ctx, "payments: transfer outcome unknown", "operation_id", opID, "err", err)
	default:
		// Nothing was sent (storage, fencing): the reservation is
		// released and a retry runs afresh.
		s.storeFailed(w, r, "transfer: begin effect", err)
	}
}
