package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/tracing"
)

// maxProviderAnswer bounds the provider answer read by ProviderClient.
const maxProviderAnswer = 1 << 20

// CodeProviderDeclined is the code of the demo provider's final refusal of
// a key (422): the only provider answer besides a 201 that is evidence.
const CodeProviderDeclined = "DECLINED"

// ProviderClient is the effect.Downstream of the demo provider (package
// provider, "idem provider"). Its classification of answers is the
// provider's contract:
//
//   - POST /transfers answering 201 with a transfer id: Executed (a repeat
//     of an executed key answers the same);
//   - 422 with code DECLINED: Declined — the provider refused the key for
//     good, in every mode, and never executes it;
//   - GET /transfers/{key} answering 200 with "status" "executed" or
//     "declined": Executed or Declined; 404: NotFound, which does not void
//     the key (the provider may still execute it), so it is no evidence;
//   - anything else — a 5xx such as 503 PROVIDER_FAILURE (the provider may
//     have executed the key before failing), another 4xx such as 422
//     PAYLOAD_CONFLICT, a timeout, a reset, an unreadable answer — is
//     Indefinite.
//
// It is safe for concurrent use.
type ProviderClient struct {
	// BaseURL is the provider's base URL, for example http://127.0.0.1:9090.
	BaseURL string
	// Client is the HTTP client; nil means a client whose timeout is
	// DefaultProviderTimeout. Its timeout, or ctx's deadline, bounds a call.
	Client *http.Client
	// Propagator injects the call's trace context (ctx's span: the
	// effect's idem.downstream.send or idem.downstream.lookup) into the
	// request's headers; nil means otel.GetTextMapPropagator(), which
	// injects nothing until the application sets one.
	Propagator propagation.TextMapPropagator
}

var _ effect.Downstream = (*ProviderClient)(nil)

var defaultProviderClient = &http.Client{Timeout: DefaultProviderTimeout}

// Send implements effect.Downstream: POST {BaseURL}/transfers with the key
// as Idempotency-Key.
func (p *ProviderClient) Send(ctx context.Context, key string, request []byte) effect.Answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url("/transfers"), bytes.NewReader(request))
	if err != nil {
		return effect.Answer{Detail: "POST /transfers: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return p.do(req, "POST /transfers", func(status int, v answer) effect.Kind {
		switch {
		case status == http.StatusCreated && v.ID != "":
			return effect.Executed
		case status == http.StatusUnprocessableEntity && v.Code == CodeProviderDeclined:
			return effect.Declined
		}
		return effect.Indefinite
	})
}

// Lookup implements effect.Downstream: GET {BaseURL}/transfers/{key}.
func (p *ProviderClient) Lookup(ctx context.Context, key string) effect.Answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/transfers/"+url.PathEscape(key)), nil)
	if err != nil {
		return effect.Answer{Detail: "GET /transfers/{key}: " + err.Error()}
	}
	return p.do(req, "GET /transfers/{key}", func(status int, v answer) effect.Kind {
		switch {
		case status == http.StatusOK && v.is("executed") && v.ID != "":
			return effect.Executed
		case status == http.StatusOK && v.is("declined"):
			return effect.Declined
		case status == http.StatusNotFound:
			return effect.NotFound
		}
		return effect.Indefinite
	})
}

// answer holds the members of a provider answer that classify it. Status
// is raw: a lookup's is a string ("executed"), a problem's the number.
type answer struct {
	ID     string          `json:"id"`
	Status json.RawMessage `json:"status"`
	Code   string          `json:"code"`
}

// is reports whether the answer's status member is the string s.
func (v answer) is(s string) bool { return string(v.Status) == `"`+s+`"` }

// do sends req and classifies the answer with classify; the body is kept
// for an answer that is evidence.
func (p *ProviderClient) do(req *http.Request, what string, classify func(status int, v answer) effect.Kind) effect.Answer {
	c := p.Client
	if c == nil {
		c = defaultProviderClient
	}
	tracing.Propagator(p.Propagator).Inject(req.Context(), propagation.HeaderCarrier(req.Header)) // W3C traceparent, when set
	resp, err := c.Do(req)
	if err != nil {
		return effect.Answer{Detail: what + ": " + err.Error()}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxProviderAnswer))
	if err != nil {
		return effect.Answer{Detail: fmt.Sprintf("%s answered %d, then reading it failed: %v", what, resp.StatusCode, err)}
	}
	var v answer
	kind := effect.Indefinite
	if json.Unmarshal(data, &v) == nil {
		kind = classify(resp.StatusCode, v)
	} else if resp.StatusCode == http.StatusNotFound {
		kind = classify(resp.StatusCode, v)
	}
	a := effect.Answer{Kind: kind, Detail: strings.TrimSpace(fmt.Sprintf("%s answered %d %s %s", what, resp.StatusCode, v.Code, v.ID))}
	switch kind {
	case effect.Executed:
		a.Handle, a.Body = v.ID, data
	case effect.Declined:
		a.Body = data
	}
	return a
}

func (p *ProviderClient) url(path string) string {
	return strings.TrimSuffix(p.BaseURL, "/") + path
}
