package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// count reads the number of resources at Config.CountURL; -1 without a
// count URL. ctx governs the request.
func (r *runner) count(ctx context.Context) (int, error) {
	if r.cfg.CountURL == "" {
		return -1, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.CountURL, nil)
	if err != nil {
		return 0, err
	}
	req.Header = r.cfg.Header.Clone()
	req.Header.Del("Content-Type")
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("count URL: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, fmt.Errorf("count URL: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, fmt.Errorf("count URL answered %d %s", resp.StatusCode, excerpt(b))
	}
	n, err := parseCount(b, r.cfg.CountField)
	if err != nil {
		return 0, fmt.Errorf("count URL: %w", err)
	}
	return n, nil
}

// parseCount reads a count answer: a JSON number, a JSON array (its
// length), or an object whose member field (by default its only member)
// is one of those.
func parseCount(b []byte, field string) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, fmt.Errorf("answer is not JSON: %w", err)
	}
	if obj, ok := v.(map[string]any); ok {
		switch {
		case field != "":
			if v, ok = obj[field]; !ok {
				return 0, fmt.Errorf("answer has no member %q", field)
			}
		case len(obj) == 1:
			for _, m := range obj {
				v = m
			}
		default:
			return 0, errors.New("answer is an object with several members; name the count's with --count-field")
		}
	}
	switch v := v.(type) {
	case json.Number:
		n, err := v.Int64()
		if err != nil || n < 0 {
			return 0, fmt.Errorf("count %s is not a whole number", v)
		}
		return int(n), nil
	case []any:
		return len(v), nil
	}
	return 0, errors.New("count is neither a number nor an array")
}

// growth reads the count again and returns "" if it grew by want since
// before, else what went wrong; "" also when there is no count URL
// (before < 0). ctx governs the request.
func (r *runner) growth(ctx context.Context, before, want int) string {
	if before < 0 {
		return ""
	}
	after, err := r.count(ctx)
	if err != nil {
		return "cannot read the count after: " + err.Error()
	}
	if after-before != want {
		return fmt.Sprintf("the count grew by %d (from %d to %d), want %d", after-before, before, after, want)
	}
	return ""
}
