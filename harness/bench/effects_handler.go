package bench

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// effectHandler is POST /v1/transfers of the effect benchmark's plain and
// floor variants, written as a careful service would without idem: it
// authenticates the bearer token, reads and canonicalises the payments.v1
// body with the same canonicaliser and schema as the reference service,
// sends the transfer to the provider with the same client as the
// reference service's (payments.ProviderClient, with the client
// payments.TransferEffects builds) and answers 201 with the transfer as
// payments.RenderTransfer renders it.
//
// With store nil (plain) the provider gets a fresh key per request: a
// retry pays again. With a store (floor) the key is derived from the
// request's scope (floorScope over the caller and its Idempotency-Key),
// and the handler writes one idem_bench_effect_floor row holding scope
// and key, committed before the call, and the provider's answer into that
// row, committed before answering (effects.sql): the least a correct
// design must write. Any failure answers 503 (storage) or 502 (provider),
// which stops the run. Safe for concurrent use.
type effectHandler struct {
	tokens   payments.Tokens
	provider *payments.ProviderClient
	store    registry.Store // nil: plain
	runID    string
	seq      atomic.Int64 // plain keys
	opts     canon.Options
}

func newEffectHandler(providerURL string, store registry.Store, runID string) *effectHandler {
	return &effectHandler{
		tokens:   benchTokens(),
		provider: &payments.ProviderClient{BaseURL: providerURL, Client: &http.Client{Timeout: payments.DefaultProviderTimeout}},
		store:    store, runID: runID,
		opts: canon.Options{Mode: canon.ModeSchema, Schema: payments.Schema()},
	}
}

// downstreamRequest is the body sent to the provider: payments'
// providerRequest.
type downstreamRequest struct {
	Amount    string `json:"amount"`
	Currency  string `json:"currency"`
	Payee     string `json:"payee"`
	Reference string `json:"reference"`
}

func (h *effectHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, ok := h.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, canon.DefaultMaxBytes+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	res, err := canon.Canonicalize(r.Header.Get("Content-Type"), body, h.opts)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req downstreamRequest
	if err := json.Unmarshal(res.Payload, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var scope []byte
	var key string
	if h.store == nil {
		key = h.runID + "-plain-" + strconv.FormatInt(h.seq.Add(1), 10)
	} else {
		k := r.Header.Get(idem.KeyHeader)
		if k == "" {
			http.Error(w, errNoKey.Error(), http.StatusBadRequest)
			return
		}
		s := floorScope(id, k)
		scope, key = s[:], hex.EncodeToString(s[:])
		if err := h.exec(ctx, "insert_effect_floor", scope, key); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	req.Reference = key
	downstream, err := json.Marshal(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	a := h.provider.Send(ctx, key, downstream)
	if a.Kind != effect.Executed {
		http.Error(w, "provider: "+a.Detail, http.StatusBadGateway)
		return
	}
	if h.store != nil {
		if err := h.exec(context.WithoutCancel(ctx), "settle_effect_floor", scope, http.StatusCreated, a.Body); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	var ans struct {
		CreatedAt string `json:"created_at"`
	}
	json.Unmarshal(a.Body, &ans)
	tr := payments.Transfer{ID: "tr_" + key, Amount: req.Amount, Currency: req.Currency, Payee: req.Payee,
		ProviderTransfer: a.Handle, CreatedAt: ans.CreatedAt}
	out, err := json.Marshal(tr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/transfers/"+tr.ID)
	w.WriteHeader(http.StatusCreated)
	w.Write(out)
}

// exec runs the named statement of effects.sql in a transaction of its
// own, which must change exactly one row.
func (h *effectHandler) exec(ctx context.Context, name string, args ...any) error {
	return h.store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		n, err := tx.Exec(ctx, queries.Get(name), args...)
		if err == nil && n != 1 {
			err = fmt.Errorf("bench: %s changed %d rows, want 1", name, n)
		}
		return err
	})
}

// errNotCreated is postTransfer's error for an answer other than 201.
var errNotCreated = errors.New("bench: transfer not created")

// postTransfer sends one POST /v1/transfers to url as principal p, with
// key unless it is "", and checks the answer: 201 with a Location under
// /v1/transfers/ and a transfer body. It returns how long the request
// took.
func postTransfer(ctx context.Context, c *http.Client, url string, p int, key string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(requestBody))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token(p))
	if key != "" {
		req.Header.Set(idem.KeyHeader, key)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(resp.Header.Get("Location"), "/v1/transfers/tr_") ||
		!strings.HasPrefix(string(body), `{"id":"tr_`) {
		return took, fmt.Errorf("%w: POST %s (key %q): status %d, body %.300s", errNotCreated, url, key, resp.StatusCode, body)
	}
	return took, nil
}
