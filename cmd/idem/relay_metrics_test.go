package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRelayMetricsStoreDown: with its database cut away, "idem relay
// --metrics-addr" still answers /metrics 200, with idem_store_up 0 (what
// IdemStoreUnavailable fires on), its counters, and without the outbox
// gauges it reads from the database (left out, not reported as 0). A
// relay whose scrape failed as a whole would show only as a target down,
// which no shipped alert reads.
// threat:alert-blind-spot
func TestRelayMetricsStoreDown(t *testing.T) {
	t.Parallel()
	dsn, proxy := proxiedDSN(t)
	secret, key := secretFile(t)
	h := newHook(t, key)
	ctx, cancel := context.WithCancel(context.Background())
	done, logs := make(chan int, 1), newLogWatch()
	go func() {
		done <- run(ctx, []string{"relay", "--db", dsn, "--webhook", h.URL, "--webhook-secret-file", secret, "--metrics-addr", "127.0.0.1:0"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: logs})
	}()
	defer func() {
		cancel()
		<-done
	}()
	var addr string
	select {
	case addr = <-logs.addr:
	case code := <-done:
		t.Fatalf("relay exited %d before listening:\n%s", code, logs)
	}
	scrape := scrapeMetrics(t, addr)
	_, body := pollUntil(t, "idem_store_up 1", 30*time.Second, scrape, storeUp("1"))
	if !strings.Contains(string(body), "\nidem_outbox_pending 0\n") {
		t.Fatalf("with the database up, /metrics lacks idem_outbox_pending 0:\n%s", body)
	}
	proxy.Close()
	_, body = pollUntil(t, "idem_store_up 0 on a 200 scrape", 30*time.Second, scrape, storeUp("0"))
	if !strings.Contains(string(body), "\nidem_outbox_delivered_total 0\n") {
		t.Errorf("with the database down, /metrics lacks the relay's counters:\n%s", body)
	}
	for _, name := range []string{"idem_outbox_pending", "idem_outbox_lag_seconds", "idem_outbox_dead_letters"} {
		if regexp.MustCompile(`(?m)^` + name + `[ {]`).Match(body) {
			t.Errorf("with the database down, /metrics still reports %s:\n%s", name, body)
		}
	}
}
