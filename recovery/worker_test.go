package recovery

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/drivers"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/provider"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// base is the injected "now" at which the tests' records are reserved.
var base = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

// env is a real store with an injected clock and a real provider.
type env struct {
	t     *testing.T
	ctx   context.Context
	store registry.Store
	now   atomic.Pointer[time.Time]
	prov  *provider.Server
	url   string
}

// stores runs fn on a fresh SQLite and a fresh PostgreSQL registry.
func stores(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "recovery.db")
			if kind == "postgres" {
				dsn = pgtest.DSN(t)
			}
			e := &env{t: t, ctx: t.Context(), prov: provider.New()}
			e.setNow(base)
			st, err := drivers.Open(t.Context(), dsn, drivers.Options{Now: func() time.Time { return *e.now.Load() }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			e.store = st
			srv := httptest.NewServer(e.prov.Handler())
			t.Cleanup(srv.Close)
			e.url = srv.URL
			fn(t, e)
		})
	}
}

func (e *env) setNow(t time.Time) { e.now.Store(&t) }

func (e *env) worker(store registry.Store) *Worker {
	return &Worker{Store: store, Provider: HTTPProvider{BaseURL: e.url}, Lease: time.Minute, Batch: 3,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func (e *env) claim(op string) registry.Claim {
	c := registry.Claim{Operation: op, Lease: 30 * time.Second}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	return c
}

func (e *env) reserve(c registry.Claim) registry.Record {
	e.t.Helper()
	rec, created, err := e.store.Reserve(e.ctx, c)
	if err != nil || !created {
		e.t.Fatalf("Reserve: created %v, %v", created, err)
	}
	return rec
}

// executing reserves c and begins its transfer effect; if sent, the
// transfer is sent to the provider with the downstream key (the owner then
// "crashes" before recording the answer).
func (e *env) executing(c registry.Claim, sent bool) (registry.Record, registry.Effect) {
	e.t.Helper()
	rec := e.reserve(c)
	eff, err := e.store.BeginEffect(e.ctx, rec, "transfer")
	if err != nil {
		e.t.Fatalf("BeginEffect: %v", err)
	}
	if sent {
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, e.url+"/transfers", strings.NewReader(`{"amount":"1.00"}`))
		req.Header.Set("Idempotency-Key", eff.DownstreamKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusCreated {
			e.t.Fatalf("POST /transfers: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	return rec, eff
}

func (e *env) get(s idem.ScopeHash) registry.Record {
	e.t.Helper()
	rec, err := e.store.Get(e.ctx, s)
	if err != nil {
		e.t.Fatalf("Get: %v", err)
	}
	return rec
}

// hook is a Store whose ExpiredLeases runs after after listing: what
// another process does between a worker's listing and its takeover.
type hook struct {
	registry.Store
	after func()
}

func (h hook) ExpiredLeases(ctx context.Context, limit int) ([]registry.Record, error) {
	recs, err := h.Store.ExpiredLeases(ctx, limit)
	if h.after != nil {
		h.after()
	}
	return recs, err
}

func TestRecovery(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		crashed := e.claim("recovery.reserved")
		reserved := e.reserve(crashed)
		late := e.reserve(e.claim("recovery.committed"))
		done, _ := e.executing(e.claim("recovery.executed"), true)
		lost, lostEff := e.executing(e.claim("recovery.lost"), false)
		live := e.reserve(registry.Claim{Operation: "recovery.live", Lease: 3 * time.Hour, Scope: idem.ScopeHash{1}})
		executed := e.prov.Executed()

		e.setNow(base.Add(time.Hour))
		w := e.worker(hook{Store: e.store, after: func() {
			// The owner of late commits after the listing: left alone.
			if _, err := e.store.Complete(e.ctx, late, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
				return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, Body: []byte("late")}}, nil
			}); err != nil {
				t.Errorf("the owner's late Complete: %v", err)
			}
		}})
		w.Batch = 10
		rep, err := w.RunOnce(e.ctx)
		if want := (Report{Released: 1, Recovered: 1, Unknown: 1, Reconciled: 1}); err != nil || rep != want {
			t.Fatalf("RunOnce = %+v, %v; want %+v", rep, err, want)
		}

		// Released: the retry reserves again; the crashed owner is fenced.
		if again, created, err := e.store.Reserve(e.ctx, crashed); err != nil || !created || again.OperationID == reserved.OperationID {
			t.Errorf("retry after release: created %v, %v", created, err)
		}
		// Committed outcome kept as the owner wrote it.
		if got := e.get(late.Scope); got.State != idem.StateSucceeded || got.OwnerGen != 1 || string(got.Response.Body) != "late" {
			t.Errorf("committed record: %s gen %d, want SUCCEEDED gen 1 untouched", got.State, got.OwnerGen)
		}
		// Executed downstream: reconciled SUCCEEDED, logged, handle recorded.
		if got := e.get(done.Scope); got.State != idem.StateSucceeded || got.Response == nil || got.Response.Status != 200 ||
			!strings.Contains(string(got.Response.Body), `"reconciled":true`) {
			t.Errorf("executed record: %s %+v, want reconciled SUCCEEDED", got.State, got.Response)
		}
		logs, err := e.store.Reconciliations(e.ctx, done.OperationID)
		if err != nil || len(logs) != 1 || logs[0].Method != registry.ReconcileProvider || logs[0].Actor != Actor ||
			!strings.Contains(logs[0].Evidence, "provider has transfer tr_") {
			t.Errorf("reconciliation log: %+v, %v", logs, err)
		}
		if effs, err := e.store.Effects(e.ctx, done.OperationID); err != nil || len(effs) != 1 ||
			!strings.HasPrefix(effs[0].Handle, "tr_") || effs[0].Result != registry.EffectSucceeded {
			t.Errorf("effects: %+v, %v", effs, err)
		}
		// Not executed downstream: UNKNOWN, not released, not re-executed.
		if got := e.get(lost.Scope); got.State != idem.StateUnknown {
			t.Errorf("lost record: %s, want UNKNOWN", got.State)
		}
		if rec, created, err := e.store.Reserve(e.ctx, registry.Claim{Scope: lost.Scope, Fingerprint: lost.Fingerprint, Operation: "recovery.lost"}); err != nil || created ||
			registry.Decide(rec, created, lost.Fingerprint) != registry.Unknown {
			t.Errorf("retry of the lost record: created %v, %v; want the Unknown verdict", created, err)
		}
		if _, ok := e.prov.Transfer(lostEff.DownstreamKey); ok || e.prov.Executed() != executed {
			t.Errorf("provider executed %d transfers (was %d): recovery re-executed", e.prov.Executed(), executed)
		}
		if got := e.get(live.Scope); got.State != idem.StateReserved || got.OwnerGen != 1 {
			t.Errorf("live record: %s gen %d, want untouched", got.State, got.OwnerGen)
		}

		// An hour later only the retry's own abandoned reservation is due:
		// UNKNOWN is never listed, so never promoted.
		e.setNow(base.Add(2 * time.Hour))
		if rep, err := e.worker(e.store).RunOnce(e.ctx); err != nil || rep != (Report{Released: 1}) {
			t.Errorf("second RunOnce = %+v, %v; want the retry's reservation released only", rep, err)
		}
		if got := e.get(lost.Scope); got.State != idem.StateUnknown {
			t.Errorf("lost record after a second round: %s", got.State)
		}
	})
}

func TestProviderUnreachable(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		rec, _ := e.executing(e.claim("recovery.unreachable"), true)
		e.setNow(base.Add(time.Hour))
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		w := e.worker(e.store)
		w.Provider = HTTPProvider{BaseURL: dead.URL}
		if rep, err := w.RunOnce(e.ctx); err != nil || rep != (Report{Unknown: 1}) {
			t.Fatalf("RunOnce = %+v, %v; want one unknown", rep, err)
		}
		if got := e.get(rec.Scope); got.State != idem.StateUnknown {
			t.Errorf("state %s, want UNKNOWN", got.State)
		}
	})
}

// winners is a Store that records the TakeOver calls that won.
type winners struct {
	registry.Store
	mu  sync.Mutex
	won map[string]int
}

func (s *winners) TakeOver(ctx context.Context, rec registry.Record, lease time.Duration) (registry.Record, error) {
	got, err := s.Store.TakeOver(ctx, rec, lease)
	if err == nil {
		s.mu.Lock()
		s.won[got.OperationID]++
		s.mu.Unlock()
	}
	return got, err
}

func TestConcurrentWorkers(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		const n, workers = 12, 4
		var recs []registry.Record
		for i := range n {
			c := e.claim("recovery.race")
			switch i % 3 {
			case 0:
				recs = append(recs, e.reserve(c))
			default:
				rec, _ := e.executing(c, i%3 == 1)
				recs = append(recs, rec)
			}
		}
		executed := e.prov.Executed()
		e.setNow(base.Add(time.Hour))
		hist := &winners{Store: e.store, won: map[string]int{}}
		reps := make([]Report, workers)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() { reps[i], errs[i] = e.worker(hist).RunOnce(e.ctx) })
		}
		wg.Wait()
		var total Report
		for i := range workers {
			if errs[i] != nil {
				t.Errorf("worker %d: %v", i, errs[i])
			}
			total = total.Add(reps[i])
		}
		if want := (Report{Released: n / 3, Unknown: n / 3, Reconciled: n / 3}); total != want {
			t.Errorf("reports sum to %+v, want %+v", total, want)
		}
		for i, r := range recs {
			if hist.won[r.OperationID] != 1 {
				t.Errorf("record %d taken over %d times, want once", i, hist.won[r.OperationID])
			}
		}
		if e.prov.Executed() != executed {
			t.Errorf("provider executed %d, want %d", e.prov.Executed(), executed)
		}
	})
}
