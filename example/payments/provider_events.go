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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/webhook"
)

// POST /webhooks/provider (PathProviderEvents) receives the demo
// provider's signed transfer events ("idem provider --events-url",
// package provider's Events) through a webhook.Receiver: Standard
// Webhooks signatures under Config.ProviderEventSecrets, each webhook-id
// answered once through the registry in the scope of the sender
// "provider". The route exists only when those secrets are set (with
// Config.Provider).
//
// An event is never evidence by itself: the top rule of the service
// (docs/contract.md §7a) records an outcome only on a lookup, a definite
// answer for the same downstream key, or an operator with written
// evidence. So an event does what the recovery worker does, sooner:
//
//   - A transfer whose operation is UNKNOWN is settled with
//     effect.Operation.Settle (actor ActorProviderEvent): a lookup of its
//     downstream key at the provider, recorded, whose definite answer
//     settles it; a lookup that is no evidence is followed by a re-send
//     of the stored request with the same key, as for the worker. When
//     that settles nothing, or the operation is still in flight (its
//     provider call has not answered or timed out yet), the event is
//     answered 503 TRANSFER_UNSETTLED with Retry-After and nothing is
//     recorded for it: the provider sends it again later.
//   - A transfer already settled, settled now, or unknown to this service
//     (no transfer operation has the event's reference and downstream key)
//     is answered 200, and that answer is recorded with its webhook-id in
//     the registry's transaction (the Receiver's): its re-sends get the same
//     bytes and change nothing.
//   - When the settled outcome contradicts the event (a
//     "transfer.succeeded" for a transfer settled as declined, or the
//     reverse), the outcome stays as it is; the event is logged at ERROR
//     and counted (idem_provider_events_total{disposition="contradicts"}).
//
// The answer is {"webhook_id":…,"type":…,"operation_id":…,"disposition":
// "settled"|"already-settled"|"contradicts"|"unmatched","state":…}. A
// verified event that is not a transfer event of the provider is refused
// 422 EVENT_INVALID (recorded, so its re-sends get the same). Unsigned,
// stale and forged deliveries are refused 401 by the Receiver before
// anything is looked up or recorded.

// Names and codes of the provider's events.
const (
	// PathProviderEvents is the route of the provider's events.
	PathProviderEvents = "/webhooks/provider"
	// OperationProviderEvent is the idempotent operation of an event
	// delivery, keyed by its webhook-id.
	OperationProviderEvent = "provider.events"
	// ActorProviderEvent is the actor of the lookups and settlements an
	// event makes.
	ActorProviderEvent = "provider event"
	// CodeEventInvalid (422): a verified event that is not a transfer
	// event (transfer.succeeded or transfer.declined with a key).
	CodeEventInvalid idem.Code = "EVENT_INVALID"
	// CodeTransferUnsettled (503): the event's transfer is still in flight
	// or UNKNOWN after the lookup; send the event again later.
	CodeTransferUnsettled idem.Code = "TRANSFER_UNSETTLED"
)

// The event types of the provider (package provider's EventSucceeded and
// EventDeclined).
const (
	eventSucceeded = "transfer.succeeded"
	eventDeclined  = "transfer.declined"
)

// eventRetryAfter is the Retry-After of 503 TRANSFER_UNSETTLED, seconds.
const eventRetryAfter = "5"

// providerEvents is the handler of PathProviderEvents.
type providerEvents struct {
	s        *Service
	verifier *webhook.Verifier
	inner    http.Handler // the Receiver around answer
	effects  *effect.Operation
	counted  *prometheus.CounterVec
}

// providerEvent is the part of an event the service reads.
type providerEvent struct {
	Type string `json:"type"`
	Data struct {
		ID        string `json:"id"`
		Key       string `json:"key"`
		Reference string `json:"reference"`
	} `json:"data"`
}

// eventOutcome is what the pre-registry step found, for the handler to
// answer and record.
type eventOutcome struct {
	Invalid     string `json:"-"` // why the event is not a transfer event
	WebhookID   string `json:"webhook_id"`
	Type        string `json:"type"`
	OperationID string `json:"operation_id,omitempty"`
	Disposition string `json:"disposition"`
	State       string `json:"state,omitempty"`
}

type eventKey struct{}

// newProviderEvents builds the receiver of the provider's events; admit
// is asked before an event is recorded (a draining registry answers 503
// DRAINING, and the provider sends the event again).
func (s *Service) newProviderEvents(ctx context.Context, cfg Config, reg prometheus.Registerer, admit func(context.Context) error) (http.Handler, error) {
	if cfg.Provider == "" {
		return nil, errors.New("payments: Config.ProviderEventSecrets needs Config.Provider: the events are about its transfers")
	}
	v := &webhook.Verifier{Secrets: cfg.ProviderEventSecrets}
	op := idemhttp.Operation{Name: OperationProviderEvent, FinalStatuses: []int{http.StatusUnprocessableEntity}, Retention: cfg.Retention}
	configure(&op, cfg)
	rc, err := webhook.New(ctx, webhook.Config{
		Store: s.store, Operation: op, Verifier: v,
		Sender:  idem.Identity{Principal: "provider"},
		Options: idemhttp.Options{Logger: s.log, WriterEpoch: &s.epoch, Admit: admit},
	})
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	pe := &providerEvents{s: s, verifier: v, effects: s.effects[OperationTransfer],
		counted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_provider_events_total",
			Help: "Provider transfer events answered once (not their re-sends), by disposition: settled, already-settled, contradicts (the settled outcome contradicts the event; it was kept), unmatched, invalid.",
		}, []string{"disposition"}),
	}
	reg.MustRegister(pe.counted)
	pe.inner = rc.Handler(http.HandlerFunc(pe.answer))
	return pe, nil
}

func (pe *providerEvents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	inner := pe.inner
	body, err := io.ReadAll(io.LimitReader(r.Body, webhook.DefaultMaxBody+1))
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || len(body) > webhook.DefaultMaxBody {
		inner.ServeHTTP(w, r) // refused by the Receiver, nothing looked up
		return
	}
	id, err := pe.verifier.Verify(r.Header, body)
	if err != nil {
		inner.ServeHTTP(w, r) // refused 401 by the Receiver, nothing looked up
		return
	}
	out, status, why := pe.settle(r.Context(), id, body)
	if status != 0 {
		if status == http.StatusServiceUnavailable && why == "" {
			idemhttp.WriteProblem(w, idem.CodeStoreUnavailable, "the store did not answer; send the event again later")
			return
		}
		w.Header().Set("Retry-After", eventRetryAfter)
		writeProblem(w, status, CodeTransferUnsettled, why)
		return
	}
	inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), eventKey{}, out)))
}

// settle finds the event's transfer and, when it is UNKNOWN, settles it on
// the provider's answer to a lookup. A status other than 0 is answered
// at once, nothing recorded: 503 with why (the transfer is not settled)
// or without (storage trouble).
func (pe *providerEvents) settle(ctx context.Context, id string, body []byte) (out eventOutcome, status int, why string) {
	out.WebhookID = id
	var ev providerEvent
	if err := json.Unmarshal(body, &ev); err != nil || (ev.Type != eventSucceeded && ev.Type != eventDeclined) || ev.Data.Key == "" {
		out.Invalid = "the event is not a transfer.succeeded or transfer.declined event with a key"
		return out, 0, ""
	}
	out.Type, out.Disposition = ev.Type, "unmatched"
	opID := ev.Data.Reference
	if !strings.HasPrefix(opID, "op_") || !storable(opID) || registry.DownstreamKey(opID, EffectTransfer) != ev.Data.Key {
		return out, 0, ""
	}
	rec, err := pe.s.store.GetByID(ctx, opID)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return out, 0, ""
	case err != nil:
		pe.s.log.ErrorContext(ctx, "payments: provider event: reading the transfer", "webhook_id", id, "err", err)
		return out, http.StatusServiceUnavailable, ""
	case rec.Operation != OperationTransfer:
		return out, 0, ""
	}
	out.OperationID = opID
	switch {
	case rec.State == idem.StateUnknown:
		st, err := pe.effects.Settle(ctx, pe.s.store, rec, ActorProviderEvent)
		if err != nil {
			pe.s.log.ErrorContext(ctx, "payments: provider event: settling the transfer", "webhook_id", id, "operation_id", opID, "err", err)
			return out, http.StatusServiceUnavailable, ""
		}
		if !st.Settled {
			pe.s.log.InfoContext(ctx, "payments: provider event: the transfer stays UNKNOWN; the lookup was no evidence",
				"webhook_id", id, "operation_id", opID, "reason", st.Reason)
			return out, http.StatusServiceUnavailable, "the transfer stays UNKNOWN: the provider's answer to its lookup is no evidence yet; send the event again later"
		}
		rec, out.Disposition = st.Record, "already-settled"
		if st.Method != "" {
			out.Disposition = "settled"
		}
	case !rec.State.Terminal():
		return out, http.StatusServiceUnavailable, "the transfer's provider call is still in flight; send the event again later"
	default:
		out.Disposition = "already-settled"
	}
	out.State = string(rec.State)
	if (ev.Type == eventSucceeded) != (rec.State == idem.StateSucceeded) {
		out.Disposition = "contradicts"
	}
	return out, 0, ""
}

// answer runs once per webhook-id, in the registry's transaction: it
// answers what settle found, and that answer is recorded.
func (pe *providerEvents) answer(w http.ResponseWriter, r *http.Request) {
	out, ok := r.Context().Value(eventKey{}).(eventOutcome)
	if !ok {
		pe.s.internal(w, r, "provider event", errors.New("answered without its outcome"))
		return
	}
	if out.Invalid != "" {
		pe.counted.WithLabelValues("invalid").Inc()
		writeProblem(w, http.StatusUnprocessableEntity, CodeEventInvalid, out.Invalid)
		return
	}
	pe.counted.WithLabelValues(out.Disposition).Inc()
	switch out.Disposition {
	case "contradicts":
		pe.s.log.ErrorContext(r.Context(), "payments: provider event CONTRADICTS the settled outcome; the outcome is kept, nothing changed: check with the provider",
			"webhook_id", out.WebhookID, "type", out.Type, "operation_id", out.OperationID, "state", out.State)
	case "unmatched":
		pe.s.log.WarnContext(r.Context(), "payments: provider event for no transfer of this service; recorded, nothing changed",
			"webhook_id", out.WebhookID, "type", out.Type)
	default:
		pe.s.log.InfoContext(r.Context(), "payments: provider event", "webhook_id", out.WebhookID, "type", out.Type,
			"operation_id", out.OperationID, "disposition", out.Disposition, "state", out.State)
	}
	writeJSON(w, http.StatusOK, out)
}
