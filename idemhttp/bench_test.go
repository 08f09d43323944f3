package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/registry"
)

// BenchmarkMiddleware measures the middleware end to end, through a real
// HTTP server (httptest.NewServer) and client, with one payments-like
// handler that writes one payment row and one outbox message in one
// transaction and answers 201 JSON, as the payments service does. The
// handler is served three ways:
//
//   - plain: no middleware; the handler opens its own transaction with
//     Store.InTx and inserts the payment and the outbox row itself
//     (BEGIN, two INSERTs, one durable COMMIT);
//   - first: behind idemhttp.Middleware, a new Idempotency-Key per request
//     (Reserve, then Complete with the payment insert, the outcome, the
//     response snapshot and the outbox message queued with AddOutbox);
//   - replay: behind the middleware, every request repeating one key whose
//     operation already succeeded (Reserve finds it; the handler never runs);
//   - first_sealed, replay_sealed: first and replay on a store that seals
//     the bodies it keeps at rest (Options.Sealer, a keyring.Ring with one
//     AES-256-GCM key): the cost of encryption at rest.
//
// The operation uses canon.ModeSchema with payments.Schema(), metrics on
// and logs discarded. Each sub-benchmark db=…/clients=…/variant runs on a
// fresh database and reports req/s and, for the middleware variants, the
// p99 latency of Store.Reserve (the acceptance point) and of the whole
// request as the client sees it.
func BenchmarkMiddleware(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run("db="+db, func(b *testing.B) {
			for _, clients := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
					for _, variant := range []string{"plain", "first", "replay", "first_sealed", "replay_sealed"} {
						b.Run(variant, func(b *testing.B) { benchMWRun(b, db, clients, variant) })
					}
				})
			}
		})
	}
}

// benchMWBody is a realistic payments.v1 request body.
const benchMWBody = `{"amount":"12.50","currency":"EUR","payee":"acct_1"}`

const (
	benchMWCreate = `CREATE TABLE bench_mw_payments (id TEXT PRIMARY KEY, body TEXT)`
	benchMWInsert = `INSERT INTO bench_mw_payments (id, body) VALUES ($1, $2)`
	// The plain handler's outbox has the shape and indexes of the
	// registry's idem_outbox, which the middleware variants write.
	benchMWCreateOutboxPG = `CREATE TABLE bench_mw_outbox (seq bigserial PRIMARY KEY,
		message_id text NOT NULL UNIQUE, topic text NOT NULL, payload bytea NOT NULL,
		created_at timestamptz NOT NULL DEFAULT statement_timestamp(), published_at timestamptz);
		CREATE INDEX bench_mw_outbox_pending ON bench_mw_outbox (seq) WHERE published_at IS NULL`
	benchMWCreateOutboxSQLite = `CREATE TABLE bench_mw_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT,
		message_id TEXT NOT NULL UNIQUE, topic TEXT NOT NULL, payload BLOB NOT NULL,
		created_at INTEGER NOT NULL DEFAULT (unixepoch()), published_at INTEGER) STRICT;
		CREATE INDEX bench_mw_outbox_pending ON bench_mw_outbox (seq) WHERE published_at IS NULL`
	benchMWInsertOutbox = `INSERT INTO bench_mw_outbox (message_id, topic, payload) VALUES ($1, $2, $3)`
)

// benchMWOpen opens a fresh store of the kind db with the business table.
// PostgreSQL gets a pool of 16 connections, as in the driver benchmarks,
// so that 16 clients are not limited by the default pool of 4.
func benchMWOpen(b *testing.B, db string, sealer registry.Sealer) registry.Store {
	b.Helper()
	dsn := "sqlite:" + filepath.Join(b.TempDir(), "b.db")
	if db == "postgres" {
		dsn = pgtest.DSN(b) + "&pool_max_conns=16"
	}
	store, err := idemstore.Open(b.Context(), dsn, idemstore.Options{Sealer: sealer})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	outbox := benchMWCreateOutboxSQLite
	if db == "postgres" {
		outbox = benchMWCreateOutboxPG
	}
	if err := store.InTx(b.Context(), func(ctx context.Context, tx registry.Tx) error {
		for _, ddl := range append([]string{benchMWCreate}, strings.Split(outbox, ";")...) {
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return store
}

// benchMWTimedStore is a registry.Store that records how long each
// Reserve takes.
type benchMWTimedStore struct {
	registry.Store
	mu      sync.Mutex
	samples []time.Duration
}

func (s *benchMWTimedStore) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	start := time.Now()
	rec, created, err := s.Store.Reserve(ctx, c)
	d := time.Since(start)
	s.mu.Lock()
	s.samples = append(s.samples, d)
	s.mu.Unlock()
	return rec, created, err
}

func (s *benchMWTimedStore) reset() {
	s.mu.Lock()
	s.samples = s.samples[:0]
	s.mu.Unlock()
}

func (s *benchMWTimedStore) p99() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return benchMWP99(s.samples)
}

// benchMWP99 returns the 99th percentile (nearest rank) of d, reordering it.
func benchMWP99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(math.Ceil(0.99*float64(len(d))))-1]
}

// benchMWPayment is the handler's resource, stored and answered as JSON.
type benchMWPayment struct {
	ID        string `json:"id"`
	Amount    string `json:"amount"`
	Currency  string `json:"currency"`
	Payee     string `json:"payee"`
	CreatedAt string `json:"created_at"`
}

// benchMWHandler is the payments-like handler of every variant. Behind the
// middleware it parses the canonical payload and writes through the
// request's transaction; without it, it reads the body itself and opens
// its own transaction with Store.InTx.
type benchMWHandler struct {
	store registry.Store
	seq   atomic.Int64
}

func (h *benchMWHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	payload := idemhttp.Payload(ctx)
	if payload == nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		payload = b
	}
	var req struct {
		Amount   string  `json:"amount"`
		Currency string  `json:"currency"`
		Payee    string  `json:"payee"`
		Memo     *string `json:"memo"`
	}
	if err := json.Unmarshal(payload, &req); err != nil || req.Amount == "" || req.Currency == "" || req.Payee == "" {
		http.Error(w, "bad payment", http.StatusBadRequest)
		return
	}
	op := idemhttp.OperationID(ctx)
	if op == "" {
		op = "plain_" + strconv.FormatInt(h.seq.Add(1), 10)
	}
	p := benchMWPayment{
		ID: "pay_" + strings.TrimPrefix(op, "op_"), Amount: req.Amount, Currency: req.Currency, Payee: req.Payee,
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano),
	}
	body, err := json.Marshal(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	insert := func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, benchMWInsert, p.ID, string(body))
		return err
	}
	if tx := idemhttp.Tx(ctx); tx != nil {
		err = insert(ctx, tx)
		if err == nil && !idemhttp.AddOutbox(ctx, registry.Message{Topic: "payment.created", Payload: body}) {
			err = errors.New("outbox unavailable")
		}
	} else {
		err = h.store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
			if err := insert(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, benchMWInsertOutbox, "msg_"+p.ID, "payment.created", body)
			return err
		})
	}
	if err != nil {
		idemhttp.WriteProblem(w, idem.CodeStoreUnavailable, "")
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Location", "/v1/payments/"+p.ID)
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// benchMWRun runs one sub-benchmark: b.N POSTs spread over clients
// goroutines against a fresh server and database.
func benchMWRun(b *testing.B, db string, clients int, variant string) {
	var sealer registry.Sealer
	if strings.HasSuffix(variant, "_sealed") {
		key, err := keyring.NewKey("bench")
		if err != nil {
			b.Fatal(err)
		}
		if sealer, err = keyring.New(keyring.File{Active: "bench", Keys: []keyring.Key{key}}); err != nil {
			b.Fatal(err)
		}
	}
	store := &benchMWTimedStore{Store: benchMWOpen(b, db, sealer)}
	handler := &benchMWHandler{store: store}
	var srvHandler http.Handler = handler
	if variant != "plain" {
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
		srvHandler = mw.Handler(handler)
	}
	srv := httptest.NewServer(srvHandler)
	b.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	// post sends one request and checks that it was answered 201 with a
	// payment, replayed or not as wantReplay says.
	post := func(ctx context.Context, key string, wantReplay bool) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(benchMWBody))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bench")
		if key != "" {
			req.Header.Set(idem.KeyHeader, key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		replayed := resp.Header.Get(idemhttp.HeaderReplayed) == "true"
		if resp.StatusCode != http.StatusCreated || replayed != wantReplay ||
			!bytes.HasPrefix(body, []byte(`{"id":"pay_`)) {
			return fmt.Errorf("%s: status %d, replayed %v, body %.200s", variant, resp.StatusCode, replayed, body)
		}
		return nil
	}

	var keyOf func(n int64) string
	switch strings.TrimSuffix(variant, "_sealed") {
	case "plain":
		keyOf = func(int64) string { return "" }
	case "first":
		prefix := "first-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
		keyOf = func(n int64) string { return prefix + strconv.FormatInt(n, 10) }
	case "replay":
		if err := post(b.Context(), "replay-key", false); err != nil { // executes once
			b.Fatal(err)
		}
		keyOf = func(int64) string { return "replay-key" }
	}
	store.reset()

	ctx := b.Context()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	lat := make([][]time.Duration, clients)
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) || failed.Load() != nil {
					return
				}
				t0 := time.Now()
				if err := post(ctx, keyOf(n), strings.HasPrefix(variant, "replay")); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(benchMWP99(slices.Concat(lat...)))/1e6, "req-p99-ms")
	if variant != "plain" {
		b.ReportMetric(float64(store.p99())/1e6, "reserve-p99-ms")
	}
}
