package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Checker asks a downstream provider whether it executed the effect sent
// with an idempotency key (SPEC E2 (a)). It never executes anything.
type Checker interface {
	// Executed reports whether the provider executed the effect with
	// downstreamKey and, if so, its handle. An error means the answer is
	// not known — which is never "not executed".
	Executed(ctx context.Context, downstreamKey string) (handle string, executed bool, err error)
}

// maxAnswer bounds the provider answer read by HTTPProvider.
const maxAnswer = 1 << 20

// HTTPProvider is a Checker for the provider of package provider (and
// "idem provider"): GET {BaseURL}/transfers/{key} answers 200 with the
// transfer as JSON (handle: its "id") when the key was executed and 404
// when it never was; any other answer is an error.
type HTTPProvider struct {
	BaseURL string
	// Client is the HTTP client; nil means http.DefaultClient. Its timeout,
	// or the context's deadline, bounds the question.
	Client *http.Client
}

var _ Checker = HTTPProvider{}

// Executed implements Checker.
func (p HTTPProvider) Executed(ctx context.Context, key string) (string, bool, error) {
	u := strings.TrimRight(p.BaseURL, "/") + "/transfers/" + url.PathEscape(key)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", false, fmt.Errorf("recovery: provider: %w", err)
	}
	c := p.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", false, fmt.Errorf("recovery: provider: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return "", false, fmt.Errorf("recovery: provider: reading the answer: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var t struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &t); err != nil || t.ID == "" {
			return "", false, fmt.Errorf("recovery: provider: GET %s: 200 without a transfer id (%v)", u, err)
		}
		return t.ID, true, nil
	case http.StatusNotFound:
		return "", false, nil
	default:
		return "", false, fmt.Errorf("recovery: provider: GET %s: unexpected status %d", u, resp.StatusCode)
	}
}
