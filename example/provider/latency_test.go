package provider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProviderLatency: with Options.Latency every POST /transfers, a new
// key's and a known key's alike, is answered no sooner than the latency
// after it was sent, and the key still executes once. A negative latency
// is refused.
func TestProviderLatency(t *testing.T) {
	t.Parallel()
	const latency = 40 * time.Millisecond
	srv, err := Open(Options{Latency: latency})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	post := func(ctx context.Context, key string) (int, time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/transfers", strings.NewReader(body1))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Idempotency-Key", key)
		start := time.Now()
		resp, err := ts.Client().Do(req)
		if err != nil {
			return 0, time.Since(start), err
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start), nil
	}
	for _, key := range []string{"k-1", "k-1"} { // a new key, then its replay
		status, took, err := post(context.Background(), key)
		if err != nil || status != http.StatusCreated || took < latency {
			t.Errorf("POST %s: %d after %v (err %v), want 201 after at least %v", key, status, took, err, latency)
		}
	}
	if srv.Executed() != 1 {
		t.Errorf("executed %d, want 1", srv.Executed())
	}
	if _, err := Open(Options{Latency: -time.Millisecond}); err == nil {
		t.Error("a negative latency was accepted")
	}
}
