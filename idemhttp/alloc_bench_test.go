package idemhttp_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
)

// Allocation budgets per request of BenchmarkMiddlewareAllocs, reported
// beside allocs/op; a run above its budget fails. They count everything
// one request makes in process: the middleware, the core, the SQLite
// driver and, on first execution, the payments-like handler.
const (
	allocBudgetReplay = 135
	allocBudgetFirst  = 520
)

// allocBudgetReplayCached is the budget of a replay answered from the
// replay cache (Operation.ReplayCache): no registry read.
const allocBudgetReplayCached = 35

// allocBody is a request body that can be read again: the benchmark
// reuses one request so that allocs/op counts the middleware's
// allocations, not the benchmark's.
type allocBody struct{ strings.Reader }

func (*allocBody) Close() error { return nil }

// allocWriter is a reusable http.ResponseWriter that keeps nothing.
type allocWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *allocWriter) Header() http.Header { return w.h }
func (w *allocWriter) WriteHeader(s int)   { w.status = s }
func (w *allocWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// BenchmarkMiddlewareAllocs measures the allocations of one request through
// idemhttp.Middleware in process (no sockets: ServeHTTP with one reused
// request and writer) on a real SQLite store, with the operation of
// BenchmarkMiddleware (canon.ModeSchema, metrics on, logs discarded):
//
//   - replay: every request repeats one key whose operation succeeded;
//   - first: a new key per request; the payments-like handler inserts its
//     row and queues an outbox message in the request's transaction;
//   - replay_cached: replay with the replay cache on (Operation.ReplayCache):
//     after the first replay the record is answered from memory
//     (allocBudgetReplayCached).
//
// It reports allocs/op and B/op, and allocs-budget, the budget above
// which it fails (allocBudgetReplay, allocBudgetReplayCached,
// allocBudgetFirst).
func BenchmarkMiddlewareAllocs(b *testing.B) {
	for _, variant := range []string{"replay", "replay_cached", "first"} {
		b.Run(variant, func(b *testing.B) { benchAllocRun(b, variant) })
	}
}

func benchAllocRun(b *testing.B, variant string) {
	store := benchMWOpen(b, "sqlite", nil)
	mw := &idemhttp.Middleware{
		Store: store,
		Operation: idemhttp.Operation{
			Name:          payments.OperationCreate,
			APIRevision:   payments.APIRevision,
			Binding:       idem.Binding{Canon: canon.Options{Mode: canon.ModeSchema, Schema: payments.Schema()}},
			FinalStatuses: []int{http.StatusUnprocessableEntity},
		},
		Identity: func(r *http.Request) (idem.Identity, error) {
			if r.Header.Get("Authorization") != "Bearer bench" {
				return idem.Identity{}, errors.New("unknown token")
			}
			return idem.Identity{Tenant: "bench", Principal: "alice"}, nil
		},
		Metrics: idemhttp.NewMetrics(prometheus.NewRegistry()),
		Logger:  slog.New(slog.DiscardHandler),
	}
	replay := variant != "first"
	if variant == "replay_cached" {
		mw.Operation.ReplayCache = idemhttp.ReplayCache{Entries: 16}
	}
	h := mw.Handler(&benchMWHandler{store: store})

	body := &allocBody{}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://bench/v1/payments", body)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer bench")
	keyHeader := []string{"replay-key"}
	req.Header[idem.KeyHeader] = keyHeader
	w := &allocWriter{h: http.Header{}}
	serve := func(wantReplay bool) {
		body.Reset(benchMWBody)
		req.ContentLength = int64(len(benchMWBody))
		clear(w.h)
		w.status, w.n = 0, 0
		h.ServeHTTP(w, req)
		if w.status != http.StatusCreated || (w.h.Get(idemhttp.HeaderReplayed) == "true") != wantReplay {
			b.Fatalf("%s: status %d, replayed %q", variant, w.status, w.h.Get(idemhttp.HeaderReplayed))
		}
	}

	// keys are made outside the timed loop, a chunk at a time, so that
	// making them is not counted.
	var keys []string
	next := 0
	refill := func() {
		keys = keys[:0]
		for range 4096 {
			keys = append(keys, "alloc-"+strconv.Itoa(next))
			next++
		}
	}
	if replay {
		serve(false) // executes once
	} else {
		refill()
	}
	budget := map[string]int{"replay": allocBudgetReplay, "replay_cached": allocBudgetReplayCached, "first": allocBudgetFirst}[variant]
	serve(replay) // warm-up: pools and caches fill here
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if variant == "first" {
			if i == len(keys) {
				b.StopTimer()
				refill()
				i = 0
				b.StartTimer()
			}
			keyHeader[0] = keys[i]
			i++
		}
		serve(replay)
	}
	b.ReportMetric(float64(budget), "allocs-budget")
	if n := testing.AllocsPerRun(50, func() {
		if variant == "first" {
			if i == len(keys) {
				refill()
				i = 0
			}
			keyHeader[0] = keys[i]
			i++
		}
		serve(replay)
	}); n > float64(budget) {
		b.Errorf("%s: %.0f allocations per request, budget %d", variant, n, budget)
	} else {
		b.Logf("%s: %.0f allocations per request, budget %d", variant, n, budget)
	}
}
