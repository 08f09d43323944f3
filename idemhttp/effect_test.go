package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/drivers"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestEffectOutsideExecution(t *testing.T) {
	called := false
	_, err := idemhttp.Effect(context.Background(), "x", func(context.Context, string) (string, error) {
		called = true
		return "h", nil
	})
	if err == nil || called {
		t.Errorf("Effect outside an execution: err %v, called %v", err, called)
	}
}

// effBench is an effect-bearing operation whose handler does what the
// request's X-Effect header says:
//
//	ok       two Effect calls with the same name, then 201
//	unknown  an Effect call returning ErrOutcomeUnknown
//	failed   an Effect call returning ErrEffectFailed, then 502
//	late500  a successful Effect call, then 500
//	none500  no Effect call, 500
type effBench struct {
	store registry.Store
	srv   *httptest.Server
	calls atomic.Int32 // downstream calls
	keys  chan string
}

func newEffBench(t *testing.T, dsn string) *effBench {
	t.Helper()
	store, err := drivers.Open(t.Context(), dsn, drivers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	b := &effBench{store: store, keys: make(chan string, 100)}
	mw := &idemhttp.Middleware{
		Store:     store,
		Operation: idemhttp.Operation{Name: "things.send", APIRevision: "v1", FinalStatuses: []int{422}, Effects: true},
		Identity: func(*http.Request) (idem.Identity, error) {
			return idem.Identity{Tenant: "t", Principal: "p"}, nil
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	b.srv = httptest.NewServer(mw.Handler(http.HandlerFunc(b.serve)))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *effBench) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if idemhttp.Tx(ctx) != nil {
		http.Error(w, "a business transaction", http.StatusInternalServerError)
		return
	}
	call := func(result error) func(context.Context, string) (string, error) {
		return func(_ context.Context, key string) (string, error) {
			b.calls.Add(1)
			b.keys <- key
			if result != nil {
				return "", result
			}
			return "h-" + key, nil
		}
	}
	switch r.Header.Get("X-Effect") {
	case "ok":
		h1, err1 := idemhttp.Effect(ctx, "send", call(nil))
		h2, err2 := idemhttp.Effect(ctx, "send", call(nil))
		if err1 != nil || err2 != nil || h1 != h2 {
			http.Error(w, fmt.Sprint(err1, err2, h1, h2), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, h1)
	case "unknown":
		_, err := idemhttp.Effect(ctx, "send", call(fmt.Errorf("timeout: %w", idemhttp.ErrOutcomeUnknown)))
		if !errors.Is(err, idemhttp.ErrOutcomeUnknown) {
			w.WriteHeader(http.StatusCreated) // would be stored if the middleware were wrong
			return
		}
		// A second call after UNKNOWN calls nothing.
		if _, err := idemhttp.Effect(ctx, "other", call(nil)); !errors.Is(err, idemhttp.ErrOutcomeUnknown) {
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	case "failed":
		_, err := idemhttp.Effect(ctx, "send", call(fmt.Errorf("refused: %w", idemhttp.ErrEffectFailed)))
		if !errors.Is(err, idemhttp.ErrEffectFailed) {
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	case "late500":
		idemhttp.Effect(ctx, "send", call(nil))
		w.WriteHeader(http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
}

func (b *effBench) post(t *testing.T, key, mode string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/things", strings.NewReader(`{"a":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Effect", mode)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

func (b *effBench) state(t *testing.T, opID string) idem.State {
	t.Helper()
	recs, err := b.store.ListOperations(t.Context(), registry.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.OperationID == opID {
			return r.State
		}
	}
	return ""
}

func problemCode(body string) idem.Code {
	var p struct{ Code idem.Code }
	json.Unmarshal([]byte(body), &p)
	return p.Code
}

func TestEffectOperations(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "eff.db")
			if db == "postgres" {
				dsn = pgtest.DSN(t)
			}
			b := newEffBench(t, dsn)

			// Same name, same key; stored and replayed.
			st, h, body := b.post(t, "k-ok", "ok")
			op := h.Get(idemhttp.HeaderOperation)
			key := registry.DownstreamKey(op, "send")
			if st != http.StatusCreated || body != "h-"+key || b.state(t, op) != idem.StateSucceeded {
				t.Fatalf("ok: %d %q (key %s) %v", st, body, key, b.state(t, op))
			}
			if k1, k2 := <-b.keys, <-b.keys; k1 != key || k2 != key {
				t.Errorf("keys %s %s, want %s", k1, k2, key)
			}
			if st, h, again := b.post(t, "k-ok", "ok"); st != http.StatusCreated || again != body || h.Get(idemhttp.HeaderReplayed) != "true" {
				t.Errorf("replay: %d %q", st, again)
			}

			// Unknown: 409 OUTCOME_UNKNOWN, UNKNOWN, never called again.
			for range 2 {
				st, h, body = b.post(t, "k-unknown", "unknown")
				op = h.Get(idemhttp.HeaderOperation)
				if st != http.StatusConflict || problemCode(body) != idem.CodeOutcomeUnknown || op == "" ||
					h.Get("Link") != "</v1/operations/"+op+`>; rel="monitor"` || h.Get("Retry-After") != "1" ||
					b.state(t, op) != idem.StateUnknown {
					t.Errorf("unknown: %d %v %s", st, h, body)
				}
			}
			// Failed downstream: the 502 is stored as FAILED_FINAL.
			st, h, _ = b.post(t, "k-failed", "failed")
			if op = h.Get(idemhttp.HeaderOperation); st != http.StatusBadGateway || b.state(t, op) != idem.StateFailedFinal {
				t.Errorf("failed: %d %v", st, b.state(t, op))
			}
			// An effect happened, then a 5xx: UNKNOWN.
			st, h, body = b.post(t, "k-late", "late500")
			if op = h.Get(idemhttp.HeaderOperation); st != http.StatusConflict || problemCode(body) != idem.CodeOutcomeUnknown || b.state(t, op) != idem.StateUnknown {
				t.Errorf("late 500: %d %s %v", st, body, b.state(t, op))
			}
			if n := b.calls.Load(); n != 5 { // ok ×2, unknown ×1, failed, late500
				t.Errorf("%d downstream calls, want 5", n)
			}
			// No effect, then a 5xx: released, a retry runs afresh.
			for range 2 {
				if st, h, _ := b.post(t, "k-none", "none500"); st != http.StatusInternalServerError || h.Get(idemhttp.HeaderReplayed) != "" {
					t.Errorf("none500: %d %v", st, h)
				}
			}
		})
	}
}
