package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestHandlerStatementError: a handler whose own statement fails (a NOT
// NULL violation, after a write that succeeded) and that answers anyway
// gets the handler's error, never 503 STORE_UNAVAILABLE, in both
// integration styles. On PostgreSQL the failed statement aborts the
// transaction, so nothing can commit: a 201 becomes 500 HANDLER_ERROR, a
// 422 is sent as the handler wrote it, nothing is recorded (the retry
// executes again) and nothing is counted as store_error. On SQLite the
// transaction survives its failed statement, so the handler's answer is
// recorded with its other write, as it decided. Without the middleware's
// note of the handler's failed statement (writeTracker.fail) the
// PostgreSQL answers are 503 STORE_UNAVAILABLE counted as store_error.
// threat:handler-error-as-outage
func TestHandlerStatementError(t *testing.T) {
	pgtest.EachDriver(t, "stmt.db", func(t *testing.T, driver, dsn string) {
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		if err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
			_, err := tx.Exec(ctx, `CREATE TABLE stmt_rows (operation_id TEXT NOT NULL)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			ctx := r.Context()
			tx := idemhttp.Tx(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO stmt_rows (operation_id) VALUES ($1)`, idemhttp.OperationID(ctx)); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			var n int
			err := tx.QueryRow(ctx, `INSERT INTO stmt_rows (operation_id) VALUES (NULL) RETURNING 1`).Scan(&n)
			if err == nil {
				http.Error(w, "the NULL was stored", 500)
				return
			}
			if r.Header.Get("X-Answer") == "refuse" {
				idemhttp.Problem{Status: 422, Code: "AMOUNT_LIMIT", Detail: "refused"}.Write(w)
				return
			}
			w.WriteHeader(201) // as if the failed statement had not failed
			fmt.Fprint(w, `{"ok":true}`)
		})
		for _, style := range styles {
			t.Run(style.name, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				mw := &idemhttp.Middleware{
					Store: store,
					Operation: idemhttp.Operation{Name: "stmt." + style.name, APIRevision: "v1",
						FinalStatuses: []int{422}},
					Identity: func(*http.Request) (idem.Identity, error) { return idem.Identity{Tenant: "t", Principal: "p"}, nil },
					Metrics:  idemhttp.NewMetrics(reg),
					Logger:   slog.New(slog.DiscardHandler),
				}
				if style.shape != nil {
					style.shape(mw)
				}
				srv := httptest.NewServer(mw.Handler(app))
				t.Cleanup(srv.Close)
				post := func(key, answer string) (int, string, string) {
					req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{}`))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", key)
					req.Header.Set("X-Answer", answer)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					return resp.StatusCode, resp.Header.Get(idemhttp.HeaderReplayed), string(b)
				}
				for _, c := range []struct {
					answer             string
					pgStatus           int
					pgCode, sqliteBody string
				}{
					{"ok", 500, `"code":"HANDLER_ERROR"`, `{"ok":true}`},
					{"refuse", 422, `"code":"AMOUNT_LIMIT"`, `"code":"AMOUNT_LIMIT"`},
				} {
					key := fmt.Sprintf("k-%s-%s-%s", driver, style.name, c.answer)
					before := calls.Load()
					for try := range 2 {
						status, replayed, body := post(key, c.answer)
						switch driver {
						case "postgres":
							if status != c.pgStatus || !strings.Contains(body, c.pgCode) || replayed != "" {
								t.Errorf("%s, try %d: %d %q (replayed %q), want %d %s, not stored", c.answer, try, status, body, replayed, c.pgStatus, c.pgCode)
							}
						default:
							want := c.pgStatus
							if c.answer == "ok" {
								want = 201
							}
							if status != want || !strings.Contains(body, c.sqliteBody) || (try == 1) != (replayed == "true") {
								t.Errorf("%s, try %d: %d %q (replayed %q), want %d %s, stored", c.answer, try, status, body, replayed, want, c.sqliteBody)
							}
						}
					}
					wantCalls := int32(1)
					if driver == "postgres" {
						wantCalls = 2 // nothing was recorded: the retry executes again
					}
					if got := calls.Load() - before; got != wantCalls {
						t.Errorf("%s: the handler ran %d times, want %d", c.answer, got, wantCalls)
					}
				}
				for _, bad := range []string{"store_error", "store_unavailable"} {
					if n := countedIn(t, reg, bad); n != 0 {
						t.Errorf("%v requests counted as %s", n, bad)
					}
				}
				if driver == "postgres" {
					if n := countedIn(t, reg, "handler_error"); n != 2 {
						t.Errorf("%v requests counted as handler_error, want 2", n)
					}
				}
			})
		}
		var rows int
		if err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM stmt_rows`).Scan(&rows)
		}); err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"postgres": 0, "sqlite": 4}[driver]; rows != want {
			t.Errorf("%d rows committed, want %d", rows, want)
		}
	})
}

// countedIn is idem_requests_total's count for outcome in reg.
func countedIn(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "idem_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
