package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stores runs fn once per driver, on a fresh database each.
func stores(t *testing.T, fn func(t *testing.T, store registry.Store)) {
	pgtest.EachDriver(t, "mw.db", func(t *testing.T, _, dsn string) {
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		if err := store.InTx(t.Context(), func(ctx context.Context, tx registry.Tx) error {
			_, err := tx.Exec(ctx, `CREATE TABLE mw_effects (operation_id TEXT NOT NULL, note TEXT)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		fn(t, store)
	})
}

// app is a handler whose behaviour a test steers through the request's
// X-Test header: "ok" (201 with a body), "final" (422 after its write),
// "refuse" (422 before writing anything), "refuse-returning" (422 after
// a write through QueryRow), "refuse-outbox" (422 after queueing an outbox
// message and nothing else), "fail" (500),
// "conflict" (409, undeclared), "panic", "big" (a body over the cap),
// "block" (waits for release before answering 201).
type app struct {
	calls   atomic.Int32
	caller  atomic.Pointer[idem.Identity] // idemhttp.Caller of the last execution
	release chan struct{}
	started chan struct{}
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	ctx := r.Context()
	tx := idemhttp.Tx(ctx)
	if tx == nil {
		http.Error(w, "no tx", 500)
		return
	}
	if r.Header.Get("X-Test") == "refuse" {
		// Reads change nothing: Query and QueryRow.
		if err := readEffects(ctx, tx); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mw_effects`).Scan(&n); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		idemhttp.Problem{Status: 422, Code: "AMOUNT_LIMIT", Detail: "too much"}.Write(w)
		return
	}
	switch r.Header.Get("X-Test") {
	case "refuse-returning":
		var note string
		if err := tx.QueryRow(ctx, `INSERT INTO mw_effects (operation_id, note) VALUES ($1, 'returning') RETURNING note`,
			idemhttp.OperationID(ctx)).Scan(&note); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		idemhttp.Problem{Status: 422, Code: "AMOUNT_LIMIT", Detail: "too much"}.Write(w)
		return
	case "refuse-outbox":
		idemhttp.AddOutbox(ctx, registry.Message{Topic: "t", Payload: []byte("m")})
		idemhttp.Problem{Status: 422, Code: "AMOUNT_LIMIT", Detail: "too much"}.Write(w)
		return
	}
	if _, err := tx.Exec(ctx, `INSERT INTO mw_effects (operation_id, note) VALUES ($1, $2)`, idemhttp.OperationID(ctx), string(idemhttp.Payload(ctx))); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	idemhttp.AddOutbox(ctx, registry.Message{Topic: "t", Payload: []byte("m")})
	if c, ok := idemhttp.Caller(ctx); ok {
		a.caller.Store(&c)
	}
	switch r.Header.Get("X-Test") {
	case "final":
		idemhttp.Problem{Status: 422, Code: "AMOUNT_LIMIT", Detail: "too much"}.Write(w)
		return
	case "fail":
		http.Error(w, "boom", 500)
		return
	case "conflict":
		http.Error(w, "busy", 409)
		return
	case "panic":
		panic("handler bug")
	case "big":
		w.Write(make([]byte, 2048))
		return
	case "block":
		a.started <- struct{}{}
		<-a.release
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Location", "/things/"+idemhttp.OperationID(ctx))
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("ETag", `"v1"`)
	w.WriteHeader(201)
	fmt.Fprintf(w, `{"id":%q,"at":%q}`, idemhttp.OperationID(ctx), time.Now().Format(time.RFC3339Nano))
}

// readEffects reads every row of mw_effects through tx.Query.
func readEffects(ctx context.Context, tx registry.Tx) error {
	rows, err := tx.Query(ctx, `SELECT operation_id, note FROM mw_effects`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, note string
		if err := rows.Scan(&id, &note); err != nil {
			return err
		}
	}
	return rows.Err()
}

type fixture struct {
	t     *testing.T
	store registry.Store
	app   *app
	srv   *httptest.Server
	reg   *prometheus.Registry
	admit atomic.Pointer[error]
	// rollouts is the middleware's Rollouts, if a shape set one.
	rollouts *idemhttp.Rollouts
}

func newFixture(t *testing.T, store registry.Store, mode idemhttp.Mode) *fixture {
	return newFixtureWith(t, store, mode, nil)
}

// newFixtureWith is newFixture with shape, if not nil, applied to the
// middleware before it serves.
func newFixtureWith(t *testing.T, store registry.Store, mode idemhttp.Mode, shape func(*idemhttp.Middleware)) *fixture {
	f := &fixture{t: t, store: store, app: &app{release: make(chan struct{}), started: make(chan struct{}, 10)}, reg: prometheus.NewRegistry()}
	mw := &idemhttp.Middleware{
		Store:         store,
		MonitorPrefix: "/v1/operations/",
		Operation: idemhttp.Operation{Name: "things.create", APIRevision: "v1", FinalStatuses: []int{422},
			Mode: mode, MaxResponseBody: 1024, MaxActiveKeys: 3},
		Identity: func(r *http.Request) (idem.Identity, error) {
			p := r.Header.Get("X-Principal")
			if p == "" {
				return idem.Identity{}, errors.New("no principal")
			}
			return idem.Identity{Tenant: "t", Principal: p}, nil
		},
		Admit: func(context.Context) error {
			if e := f.admit.Load(); e != nil {
				return *e
			}
			return nil
		},
		Metrics: idemhttp.NewMetrics(f.reg),
	}
	if shape != nil {
		shape(mw)
	}
	f.rollouts = mw.Rollouts
	mux := http.NewServeMux()
	mux.Handle("/things", mw.Handler(f.app))
	if mw.MonitorPrefix != "" {
		mux.Handle("GET "+mw.MonitorPrefix, mw.MonitorHandler())
	}
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

type result struct {
	status int
	header http.Header
	body   string
}

func (f *fixture) post(key, body string, hdr ...string) result {
	f.t.Helper()
	return f.postCtx(f.t.Context(), key, body, hdr...)
}

func (f *fixture) postCtx(ctx context.Context, key, body string, hdr ...string) result {
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/things", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Principal", "alice")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func (f *fixture) effects() int {
	var n int
	err := f.store.InTx(f.t.Context(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM mw_effects`).Scan(&n)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func code(r result) string {
	const k = `"code":"`
	i := strings.Index(r.body, k)
	if i < 0 {
		return ""
	}
	rest := r.body[i+len(k):]
	return rest[:strings.IndexByte(rest, '"')]
}

// Proves threat:same-key-different-request (docs/threat-model.md).
func TestExecuteReplayConflict(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		f := newFixture(t, store, idemhttp.Enforce)
		first := f.post("k1", `{"a": 1, "b": [1,2]}`)
		if first.status != 201 || first.header.Get("Idempotency-Contract") != idem.ContractVersion || first.header.Get("Idempotency-Operation") == "" {
			t.Fatalf("first: %+v", first)
		}
		again := f.post("k1", `{"b":[1,2],"a":1}`)
		if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Idempotency-Operation") != first.header.Get("Idempotency-Operation") ||
			again.header.Get("Location") != first.header.Get("Location") || again.header.Get("ETag") != `"v1"` ||
			again.header.Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("replay differs:\n first %+v\n again %+v", first, again)
		}
		if again.header.Get("Set-Cookie") != "" {
			t.Errorf("replay carried Set-Cookie")
		}
		conflict := f.post("k1", `{"a": 2, "b": [1,2]}`)
		if conflict.status != 422 || code(conflict) != "PAYLOAD_CONFLICT" || conflict.header.Get("Idempotency-Operation") != "" ||
			strings.Contains(conflict.body, first.header.Get("Idempotency-Operation")) {
			t.Errorf("conflict: %+v", conflict)
		}
		if f.app.calls.Load() != 1 || f.effects() != 1 {
			t.Errorf("handler ran %d times, %d effects; want 1 and 1", f.app.calls.Load(), f.effects())
		}
		if c := f.app.caller.Load(); c == nil || *c != (idem.Identity{Tenant: "t", Principal: "alice"}) {
			t.Errorf("idemhttp.Caller in the handler: %v, want t/alice", c)
		}
		bob := f.post("k1", `{"a": 1, "b": [1,2]}`, "X-Principal", "bob")
		if bob.status != 201 || bob.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("another principal with the same key must execute: %+v", bob)
		}
		if n := f.counted("idem_requests_total", "outcome", "replayed"); n != 1 {
			t.Errorf("replayed counter %v, want 1", n)
		}
	})
}

// counted returns the value of a metric series with one matching label.
func (f *fixture) counted(metric, label, value string) float64 {
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
