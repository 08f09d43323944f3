package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

// sqlTxApp writes one mw_effects row through idemhttp.SQLTx's *sql.Tx
// (the operation ID inlined: placeholders differ by engine) and answers
// as its X-Test header says: 201, "refuse" (a declared 422 after the
// write) or "fail" (500 after the write).
type sqlTxApp struct{ calls atomic.Int32 }

func (a *sqlTxApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	ctx := r.Context()
	tx, err := idemhttp.SQLTx(ctx)
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO mw_effects (operation_id, note) VALUES ('`+idemhttp.OperationID(ctx)+`', 'sqltx')`); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	switch r.Header.Get("X-Test") {
	case "refuse":
		idemhttp.Problem{Status: 422, Code: "AMOUNT_LIMIT", Detail: "too much"}.Write(w)
		return
	case "fail":
		http.Error(w, "boom", 500)
		return
	}
	w.WriteHeader(201)
	fmt.Fprintf(w, `{"id":%q}`, idemhttp.OperationID(ctx))
}

// TestSQLTx: a handler that writes through idemhttp.SQLTx, in enforce
// (both styles), shadow and off modes: a 201 commits its row and a 500
// commits nothing, so the retry runs afresh; in enforce a retry of the
// 201 replays without running the handler again; a declared refusal after a write through the *sql.Tx is stored
// as FAILED_FINAL, never as a REJECTED that changed nothing.
//
// threat:sqltx-split-commit
func TestSQLTx(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		for _, m := range []struct {
			name string
			mode idemhttp.Mode
			once bool
		}{{"enforce", idemhttp.Enforce, false}, {"enforce-once", idemhttp.Enforce, true}, {"shadow", idemhttp.Shadow, false}, {"off", idemhttp.Off, false}} {
			t.Run(m.name, func(t *testing.T) {
				app := &sqlTxApp{}
				mw := &idemhttp.Middleware{
					Store: store,
					Operation: idemhttp.Operation{Name: "sqltx." + m.name, APIRevision: "v1", FinalStatuses: []int{422},
						Mode: m.mode, OneTransaction: m.once},
					Identity: func(r *http.Request) (idem.Identity, error) {
						return idem.Identity{Tenant: "t", Principal: "alice"}, nil
					},
				}
				srv := httptest.NewServer(mw.Handler(app))
				t.Cleanup(srv.Close)
				post := func(key, test string) result {
					req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL, strings.NewReader(`{"n":1}`))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", key)
					req.Header.Set("X-Test", test)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					return result{status: resp.StatusCode, header: resp.Header}
				}

				// 500: nothing committed, the retry runs again.
				key := idem.NewKey()
				before := countAll(t, store)
				if r := post(key, "fail"); r.status != 500 {
					t.Fatalf("fail: status %d", r.status)
				}
				if n := countAll(t, store); n != before {
					t.Errorf("a 500 committed %d rows written through the *sql.Tx", n-before)
				}
				calls := app.calls.Load()
				if r := post(key, ""); r.status != 201 {
					t.Fatalf("retry after the 500: status %d", r.status)
				}
				if app.calls.Load() != calls+1 {
					t.Errorf("the retry after a 500 did not run the handler")
				}
				if n := countAll(t, store); n != before+1 {
					t.Errorf("after a 201, %d new rows, want 1", n-before)
				}
				if m.mode != idemhttp.Enforce {
					return // shadow (never enforced) and off run every request
				}
				calls = app.calls.Load()
				r := post(key, "")
				if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || app.calls.Load() != calls {
					t.Errorf("replay: status %d replayed %q, handler ran %d more times", r.status, r.header.Get("Idempotent-Replayed"), app.calls.Load()-calls)
				}
				if n := countAll(t, store); n != before+1 {
					t.Errorf("after the replay, %d new rows, want 1", n-before)
				}
				// A declared refusal after a write through the *sql.Tx.
				key = idem.NewKey()
				if r := post(key, "refuse"); r.status != 422 {
					t.Fatalf("refuse: status %d", r.status)
				}
				var state string
				err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
					return tx.QueryRow(ctx, `SELECT state FROM idem_operations WHERE operation = $1 ORDER BY created_at DESC LIMIT 1`, "sqltx."+m.name).Scan(&state)
				})
				if err != nil || state != string(idem.StateFailedFinal) {
					t.Errorf("a refusal after a write through the *sql.Tx is stored as %q (%v), want FAILED_FINAL", state, err)
				}
			})
		}
	})
}

// countAll counts mw_effects.
func countAll(t *testing.T, store registry.Store) int {
	t.Helper()
	var n int
	err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM mw_effects`).Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSQLTxOutside: outside the middleware there is no *sql.Tx.
func TestSQLTxOutside(t *testing.T) {
	if _, err := idemhttp.SQLTx(context.Background()); !errors.Is(err, registry.ErrNoSQLTx) {
		t.Errorf("SQLTx outside the middleware: %v, want ErrNoSQLTx", err)
	}
}
