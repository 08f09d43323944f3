package recovery

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// base is the injected "now" at which the tests' records are reserved.
var base = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

// Names of the tests' operations and of their one effect.
const (
	opTransfer = "recovery.transfer" // settled with the demo provider
	opDecline  = "recovery.decline"  // its downstream declines every key
	opOrphan   = "recovery.orphan"   // no effects configured: an operator's
	effName    = "transfer"
)

// counter passes requests to next, counting them by method.
type counter struct {
	next        http.Handler
	posts, gets atomic.Int32
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		c.posts.Add(1)
	case http.MethodGet:
		c.gets.Add(1)
	}
	c.next.ServeHTTP(w, r)
}

// calls returns the requests counted so far.
func (c *counter) calls() (posts, gets int32) { return c.posts.Load(), c.gets.Load() }

// declineBody is what the declining downstream answers every POST.
const declineBody = `{"code":"DECLINED","detail":"refused for good"}`

// env is a real store with an injected clock, a real provider and a real
// declining downstream, both behind request counters.
type env struct {
	t       *testing.T
	ctx     context.Context
	store   registry.Store
	now     atomic.Pointer[time.Time]
	prov    *provider.Server
	hits    *counter // the provider's requests
	url     string   // the provider's base URL
	refused *counter // the declining downstream's requests
	decURL  string
}

// stores runs fn on a fresh SQLite and a fresh PostgreSQL registry.
func stores(t *testing.T, fn func(t *testing.T, e *env)) {
	pgtest.EachDriver(t, "recovery.db", func(t *testing.T, _, dsn string) {
		e := &env{t: t, ctx: t.Context(), prov: provider.New()}
		e.setNow(base)
		st, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: func() time.Time { return *e.now.Load() }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		e.store = st
		e.hits = &counter{next: e.prov.Handler()}
		srv := httptest.NewServer(e.hits)
		t.Cleanup(srv.Close)
		e.url = srv.URL
		// A downstream whose contract declines every key for good
		// (422 DECLINED) and whose lookup never finds one (404).
		e.refused = &counter{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodPost {
				w.WriteHeader(http.StatusUnprocessableEntity)
				w.Write([]byte(declineBody))
				return
			}
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":"NOT_FOUND"}`))
		})}
		dec := httptest.NewServer(e.refused)
		t.Cleanup(dec.Close)
		e.decURL = dec.URL
		fn(t, e)
	})
}

func (e *env) setNow(t time.Time) { e.now.Store(&t) }

// render is the tests' Renderer: 201 "executed <handle>: <request>" and a
// transfer.executed message carrying the downstream's answer when the
// effect succeeded; 422 "declined <key>" and transfer.declined carrying
// the answer when it was declined; a reconciled record (UNKNOWN) also gets
// transfer.settled.
func render(rec registry.Record, effs []registry.Effect) (registry.Outcome, error) {
	if len(effs) != 1 || effs[0].Name != effName {
		return registry.Outcome{}, fmt.Errorf("render %s: effects %+v", rec.OperationID, effs)
	}
	e := effs[0]
	var out registry.Outcome
	switch e.Result {
	case registry.EffectSucceeded:
		out = registry.Outcome{State: idem.StateSucceeded,
			Response: idem.Response{Status: http.StatusCreated, MediaType: "text/plain", Location: "/t/" + e.Handle,
				Body: []byte("executed " + e.Handle + ": " + string(e.Request))},
			Outbox: []registry.Message{{Topic: "transfer.executed", Payload: e.Answer}}}
	case registry.EffectFailed:
		out = registry.Outcome{State: idem.StateFailedFinal,
			Response: idem.Response{Status: http.StatusUnprocessableEntity, MediaType: "text/plain", Body: []byte("declined " + e.DownstreamKey)},
			Outbox:   []registry.Message{{Topic: "transfer.declined", Payload: e.Answer}}}
	default:
		return registry.Outcome{}, fmt.Errorf("render %s: effect not settled", rec.OperationID)
	}
	if rec.State == idem.StateUnknown {
		out.Outbox = append(out.Outbox, registry.Message{Topic: "transfer.settled", Payload: []byte(rec.OperationID)})
	}
	return out, nil
}

// effects returns the effects of the tests' operations, the provider
// called through client (nil: a default ProviderClient).
func (e *env) effects(client *http.Client) effect.Set {
	return effect.Set{
		opTransfer: {Downstreams: map[string]effect.Downstream{effName: &payments.ProviderClient{BaseURL: e.url, Client: client}}, Render: render},
		opDecline:  {Downstreams: map[string]effect.Downstream{effName: &payments.ProviderClient{BaseURL: e.decURL}}, Render: render},
	}
}

func (e *env) worker(store registry.Store) *Worker {
	return &Worker{Store: store, Effects: e.effects(nil), Lease: time.Minute, Batch: 3,
		Logger: slog.New(slog.DiscardHandler)}
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

// request is the request stored with the effect of rec.
func request(rec registry.Record) []byte {
	return []byte(`{"amount":"1.00","currency":"EUR","payee":"acct_1","reference":"` + rec.OperationID + `"}`)
}

// executing reserves c and begins its effect with request(rec); if sent,
// the request reaches the provider with the downstream key and is executed
// there (the owner then "crashes" before recording the answer).
func (e *env) executing(c registry.Claim, sent bool) (registry.Record, registry.Effect) {
	e.t.Helper()
	rec := e.reserve(c)
	eff, err := e.store.BeginEffect(e.ctx, rec, effName, request(rec))
	if err != nil {
		e.t.Fatalf("BeginEffect: %v", err)
	}
	if sent {
		p := &payments.ProviderClient{BaseURL: e.url}
		if a := p.Send(e.ctx, eff.DownstreamKey, eff.Request); a.Kind != effect.Executed {
			e.t.Fatalf("sending %s: %+v", eff.DownstreamKey, a)
		}
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

// effect returns the one stored effect of an operation.
func (e *env) effect(opID string) registry.Effect {
	e.t.Helper()
	effs, err := e.store.Effects(e.ctx, opID)
	if err != nil || len(effs) != 1 {
		e.t.Fatalf("Effects(%s) = %+v, %v; want one", opID, effs, err)
	}
	return effs[0]
}

// reconciled checks that opID was reconciled exactly once, by Actor, to
// state, with one of methods.
func (e *env) reconciled(opID string, state idem.State, methods ...string) {
	e.t.Helper()
	logs, err := e.store.Reconciliations(e.ctx, opID)
	if err != nil || len(logs) != 1 || !slices.Contains(methods, logs[0].Method) || logs[0].Actor != Actor ||
		logs[0].Outcome != state || logs[0].Evidence == "" {
		e.t.Errorf("reconciliation log of %s: %+v, %v; want one entry by %s to %s with method %q", opID, logs, err, Actor, state, methods)
	}
}

// outbox claims every unpublished message and returns them by operation.
func (e *env) outbox() map[string][]registry.OutboxMessage {
	e.t.Helper()
	msgs, err := e.store.ClaimOutbox(e.ctx, 1000, time.Minute)
	if err != nil {
		e.t.Fatalf("ClaimOutbox: %v", err)
	}
	by := map[string][]registry.OutboxMessage{}
	for _, m := range msgs {
		by[m.OperationID] = append(by[m.OperationID], m)
	}
	return by
}

// checkOutbox checks that opID's messages are exactly the topics given,
// in order, with their stable IDs.
func checkOutbox(t *testing.T, by map[string][]registry.OutboxMessage, opID string, topics ...string) []registry.OutboxMessage {
	t.Helper()
	msgs := by[opID]
	ok := len(msgs) == len(topics)
	for i := 0; ok && i < len(msgs); i++ {
		ok = msgs[i].Topic == topics[i] && msgs[i].ID == registry.MessageID(opID, i)
	}
	if !ok {
		t.Errorf("outbox of %s: %+v, want topics %q", opID, msgs, topics)
	}
	return msgs
}

// settleCounts returns the sample count of idem_unknown_settle_seconds by
// "operation/method".
func settleCounts(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() != "idem_unknown_settle_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["operation"]+"/"+l["method"]] = m.GetHistogram().GetSampleCount()
		}
	}
	return got
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

// TestRecovery: one round handles every kind of record. An expired
// EXECUTING record is taken over (generation 2), marked UNKNOWN and
// settled on evidence: by lookup when the provider executed the key
// (method provider), by re-sending the stored request with the same key
// when the lookup finds nothing (method replay, executed once), by the
// re-send's final refusal (declined → FAILED_FINAL). The stored response
// and outbox are the Renderer's. A record whose owner committed after the
// listing is left alone; an expired RESERVED record is not touched; a live
// lease is not touched; an operation without configured effects stays
// UNKNOWN.
func TestRecovery(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		reservedClaim := e.claim(opTransfer)
		reserved := e.reserve(reservedClaim)
		late, _ := e.executing(e.claim(opTransfer), true)
		done, doneEff := e.executing(e.claim(opTransfer), true)
		lost, lostEff := e.executing(e.claim(opTransfer), false)
		declined, declinedEff := e.executing(e.claim(opDecline), false)
		orphan, _ := e.executing(e.claim(opOrphan), false)
		liveClaim := e.claim(opTransfer)
		liveClaim.Lease = 3 * time.Hour
		live, _ := e.executing(liveClaim, false)
		executed := e.prov.Executed()
		posts, gets := e.hits.calls()
		if executed != 2 || posts != 2 || gets != 0 {
			t.Fatalf("setup: provider executed %d, %d POST %d GET", executed, posts, gets)
		}
		doneAnswer, _ := e.prov.Transfer(doneEff.DownstreamKey)

		e.setNow(base.Add(time.Hour))
		var once sync.Once
		w := e.worker(hook{Store: e.store, after: func() {
			// The owner of late commits after the listing: left alone.
			once.Do(func() {
				if _, err := e.store.Complete(e.ctx, late, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
					return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, Body: []byte("late")}}, nil
				}); err != nil {
					t.Errorf("the owner's late Complete: %v", err)
				}
			})
		}})
		w.Batch = 10
		// The worker's backoff runs on the wall clock: an hour outlasts
		// this test on any machine, so "not due yet" below does not
		// depend on how fast the first round was.
		w.Backoff = time.Hour
		reg := prometheus.NewRegistry()
		w.Metrics = NewMetrics(reg)
		rep, err := w.RunOnce(e.ctx)
		if want := (Report{Recovered: 1, Unknown: 4, Reconciled: 3, Unsettled: 1}); err != nil || rep != want {
			t.Fatalf("RunOnce = %+v, %v; want %+v", rep, err, want)
		}

		// Expired RESERVED: untouched, the client's retry continues it.
		if got := e.get(reserved.Scope); got.OperationID != reserved.OperationID || got.State != idem.StateReserved || got.OwnerGen != 1 {
			t.Errorf("expired reservation: %s %s gen %d, want %s RESERVED gen 1", got.OperationID, got.State, got.OwnerGen, reserved.OperationID)
		}
		if again, created, err := e.store.Reserve(e.ctx, reservedClaim); err != nil || created || again.OperationID != reserved.OperationID {
			t.Errorf("retry of the expired reservation: %s created %v, %v; want the same operation", again.OperationID, created, err)
		}
		// Committed meanwhile: kept as the owner wrote it.
		if got := e.get(late.Scope); got.State != idem.StateSucceeded || got.OwnerGen != 1 || string(got.Response.Body) != "late" {
			t.Errorf("committed record: %s gen %d, want SUCCEEDED gen 1 untouched", got.State, got.OwnerGen)
		}
		// Live lease: untouched.
		if got := e.get(live.Scope); got.State != idem.StateExecuting || got.OwnerGen != 1 {
			t.Errorf("live record: %s gen %d, want EXECUTING gen 1", got.State, got.OwnerGen)
		}
		// No effects configured: UNKNOWN for an operator, never reconciled.
		if got := e.get(orphan.Scope); got.State != idem.StateUnknown || got.OwnerGen != 2 || got.Response != nil {
			t.Errorf("orphan record: %s gen %d %+v, want UNKNOWN gen 2 without a response", got.State, got.OwnerGen, got.Response)
		}
		if logs, err := e.store.Reconciliations(e.ctx, orphan.OperationID); err != nil || len(logs) != 0 {
			t.Errorf("orphan reconciliations: %+v, %v", logs, err)
		}

		// Executed downstream: settled by lookup; the rendered outcome.
		got := e.get(done.Scope)
		eff := e.effect(done.OperationID)
		if eff.Result != registry.EffectSucceeded || !strings.HasPrefix(eff.Handle, "tr_") || !bytes.Equal(eff.Answer, doneAnswer) ||
			!bytes.Equal(eff.Request, request(done)) || eff.DownstreamKey != doneEff.DownstreamKey {
			t.Errorf("effect of the executed record: %+v", eff)
		}
		want := idem.Response{Status: 201, MediaType: "text/plain", Location: "/t/" + eff.Handle, Body: []byte("executed " + eff.Handle + ": " + string(request(done)))}
		if got.State != idem.StateSucceeded || got.OwnerGen != 2 || got.Response == nil || got.Response.Status != want.Status ||
			got.Response.MediaType != want.MediaType || got.Response.Location != want.Location || !bytes.Equal(got.Response.Body, want.Body) {
			t.Errorf("executed record: %s gen %d %+v; want SUCCEEDED gen 2 with %+v", got.State, got.OwnerGen, got.Response, want)
		}
		e.reconciled(done.OperationID, idem.StateSucceeded, registry.ReconcileProvider)

		// Not executed downstream: the lookup finds nothing, the stored
		// request is re-sent with the same key and executed now, once.
		got = e.get(lost.Scope)
		eff = e.effect(lost.OperationID)
		lostAnswer, ok := e.prov.Transfer(lostEff.DownstreamKey)
		if !ok || got.State != idem.StateSucceeded || eff.Result != registry.EffectSucceeded || !bytes.Equal(eff.Answer, lostAnswer) ||
			got.Response == nil || string(got.Response.Body) != "executed "+eff.Handle+": "+string(request(lost)) {
			t.Errorf("lost record: %s %+v, effect %+v, provider has it %v", got.State, got.Response, eff, ok)
		}
		e.reconciled(lost.OperationID, idem.StateSucceeded, registry.ReconcileReplay)

		// Declined on the re-send: FAILED_FINAL with the rendered 422.
		got = e.get(declined.Scope)
		eff = e.effect(declined.OperationID)
		if got.State != idem.StateFailedFinal || got.Response == nil || got.Response.Status != 422 ||
			string(got.Response.Body) != "declined "+declinedEff.DownstreamKey ||
			eff.Result != registry.EffectFailed || string(eff.Answer) != declineBody || eff.Handle != "" {
			t.Errorf("declined record: %s %+v, effect %+v", got.State, got.Response, eff)
		}
		e.reconciled(declined.OperationID, idem.StateFailedFinal, registry.ReconcileReplay)

		// The Renderer's outbox rows were stored with the outcomes.
		by := e.outbox()
		if msgs := checkOutbox(t, by, done.OperationID, "transfer.executed", "transfer.settled"); len(msgs) == 2 &&
			(!bytes.Equal(msgs[0].Payload, doneAnswer) || string(msgs[1].Payload) != done.OperationID) {
			t.Errorf("outbox payloads of the executed record: %q %q", msgs[0].Payload, msgs[1].Payload)
		}
		checkOutbox(t, by, lost.OperationID, "transfer.executed", "transfer.settled")
		if msgs := checkOutbox(t, by, declined.OperationID, "transfer.declined", "transfer.settled"); len(msgs) == 2 && string(msgs[0].Payload) != declineBody {
			t.Errorf("outbox payload of the declined record: %q", msgs[0].Payload)
		}
		for _, id := range []string{orphan.OperationID, live.OperationID, reserved.OperationID} {
			checkOutbox(t, by, id)
		}

		// The provider executed the lost transfer only: one lookup per
		// settled transfer, one re-send for the lost one.
		posts, gets = e.hits.calls()
		if e.prov.Executed() != executed+1 || posts != 3 || gets != 2 {
			t.Errorf("provider: executed %d (was %d), %d POST, %d GET; want one more, 3 POST, 2 GET", e.prov.Executed(), executed, posts, gets)
		}
		if posts, gets := e.refused.calls(); posts != 1 || gets != 1 {
			t.Errorf("declining downstream: %d POST, %d GET; want 1 and 1", posts, gets)
		}
		if got, want := settleCounts(t, reg), map[string]uint64{opTransfer + "/provider": 1, opTransfer + "/replay": 1, opDecline + "/replay": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("settle metrics %v, want %v", got, want)
		}

		// A second round: nothing to take over; the orphan is not due yet
		// for this worker (backoff), and another worker leaves it UNKNOWN.
		if rep, err := w.RunOnce(e.ctx); err != nil || rep != (Report{}) {
			t.Errorf("second RunOnce = %+v, %v; want nothing done", rep, err)
		}
		if rep, err := e.worker(e.store).RunOnce(e.ctx); err != nil || rep != (Report{Unsettled: 1}) {
			t.Errorf("a new worker's RunOnce = %+v, %v; want the orphan unsettled", rep, err)
		}
		if got := e.get(orphan.Scope); got.State != idem.StateUnknown || got.OwnerGen != 2 {
			t.Errorf("orphan after more rounds: %s gen %d", got.State, got.OwnerGen)
		}
		if p, g := e.hits.calls(); p != posts || g != gets {
			t.Errorf("later rounds called the provider: %d POST %d GET", p-posts, g-gets)
		}
	})
}

// TestIndefiniteAnswers: answers that prove nothing — a 503 on the
// re-send after a lookup that found nothing, a timeout after the provider
// executed the key — never settle the operation: it stays UNKNOWN, with
// no result, answer or reconciliation stored, and the worker tries it
// again only after its backoff. Once the provider answers, the operation
// is settled on evidence and the provider executed the key once.
func TestIndefiniteAnswers(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		rec, eff := e.executing(e.claim(opTransfer), false)
		e.setNow(base.Add(time.Hour))
		unsettled := func(step string) {
			t.Helper()
			got, stored := e.get(rec.Scope), e.effect(rec.OperationID)
			logs, err := e.store.Reconciliations(e.ctx, rec.OperationID)
			if got.State != idem.StateUnknown || got.OwnerGen != 2 || got.Response != nil ||
				stored.Result != "" || stored.Answer != nil || stored.Handle != "" || err != nil || len(logs) != 0 {
				t.Fatalf("%s: %s gen %d %+v, effect %+v, reconciliations %+v %v; want UNKNOWN, nothing settled",
					step, got.State, got.OwnerGen, got.Response, stored, logs, err)
			}
		}

		// 503: lookup (404, not evidence) then re-send (503).
		if err := e.prov.SetMode(provider.ModeFail); err != nil {
			t.Fatal(err)
		}
		w := e.worker(e.store)
		w.Backoff = time.Hour
		if rep, err := w.RunOnce(e.ctx); err != nil || rep != (Report{Unknown: 1, Unsettled: 1}) {
			t.Fatalf("RunOnce with a failing provider = %+v, %v", rep, err)
		}
		unsettled("after a 503")
		if p, g := e.hits.calls(); p != 1 || g != 1 || e.prov.Executed() != 0 {
			t.Fatalf("provider: %d POST %d GET, executed %d; want one lookup and one re-send, nothing executed", p, g, e.prov.Executed())
		}
		// Backoff: an immediate second round does not ask again.
		if rep, err := w.RunOnce(e.ctx); err != nil || rep != (Report{}) {
			t.Errorf("immediate second RunOnce = %+v, %v; want nothing (backoff)", rep, err)
		}
		if p, g := e.hits.calls(); p != 1 || g != 1 {
			t.Errorf("the second round called the provider: %d POST %d GET", p, g)
		}

		// Timeout after the effect happened: the provider executes the
		// re-send and withholds the answer until the client gives up.
		if err := e.prov.SetMode(provider.ModeHang); err != nil {
			t.Fatal(err)
		}
		impatient := e.worker(e.store)
		impatient.Effects = e.effects(&http.Client{Timeout: time.Second})
		if rep, err := impatient.RunOnce(e.ctx); err != nil || rep != (Report{Unsettled: 1}) {
			t.Fatalf("RunOnce with a hanging provider = %+v, %v", rep, err)
		}
		unsettled("after a timeout")
		// The provider may execute the re-send after the client gave up.
		waitCtx, cancelWait := context.WithTimeout(e.ctx, 30*time.Second)
		err := e.prov.WaitExecuted(waitCtx, 1)
		cancelWait()
		if _, ok := e.prov.Transfer(eff.DownstreamKey); err != nil || !ok || e.prov.Executed() != 1 {
			t.Fatalf("the provider did not execute the re-sent key (executed %d)", e.prov.Executed())
		}

		// The provider answers again: a lookup proves the execution.
		if err := e.prov.SetMode(provider.ModeOK); err != nil {
			t.Fatal(err)
		}
		if rep, err := e.worker(e.store).RunOnce(e.ctx); err != nil || rep != (Report{Reconciled: 1}) {
			t.Fatalf("RunOnce with a healthy provider = %+v, %v", rep, err)
		}
		e.reconciled(rec.OperationID, idem.StateSucceeded, registry.ReconcileProvider)
		if got := e.get(rec.Scope); got.State != idem.StateSucceeded || got.Response == nil || got.Response.Status != 201 {
			t.Errorf("settled record: %s %+v", got.State, got.Response)
		}
		if e.prov.Executed() != 1 {
			t.Errorf("provider executed %d transfers, want 1", e.prov.Executed())
		}
		// The first worker's backoff entry is dropped once the operation
		// was settled elsewhere and is listed no more.
		if rep, err := w.RunOnce(e.ctx); err != nil || rep != (Report{}) {
			t.Errorf("RunOnce after the settlement = %+v, %v", rep, err)
		}
		w.mu.Lock()
		left := len(w.retry)
		w.mu.Unlock()
		if left != 0 {
			t.Errorf("%d operations still scheduled after the settlement", left)
		}
	})
}

// TestBackoffGrows: each failed try of an UNKNOWN operation doubles the
// worker's wait before the next, up to MaxBackoff, and is recorded for
// the console (registry.LastRecoveryAttempt: the count, the error, the
// next time); a settlement forgets both.
//
// threat:unknown-without-reason
func TestBackoffGrows(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		rec, _ := e.executing(e.claim(opTransfer), false)
		e.setNow(base.Add(time.Hour))
		if err := e.prov.SetMode(provider.ModeFail); err != nil {
			t.Fatal(err)
		}
		w := e.worker(e.store)
		w.Backoff, w.MaxBackoff = time.Nanosecond, 3*time.Nanosecond
		for i, want := range []time.Duration{1, 2, 3, 3} {
			rep, err := w.RunOnce(e.ctx)
			if err != nil || rep.Unsettled != 1 || rep.Reconciled != 0 {
				t.Fatalf("round %d: %+v, %v", i, rep, err)
			}
			w.mu.Lock()
			b, ok := w.retry[rec.OperationID]
			w.mu.Unlock()
			if !ok || b.wait != want {
				t.Errorf("round %d: wait %v (scheduled %v), want %v", i, b.wait, ok, want)
			}
			a, err := registry.LastRecoveryAttempt(e.ctx, e.store, rec.OperationID)
			if err != nil || a.Attempts != int64(i+1) || a.LastError == "" || a.NextAt.Before(a.At) {
				t.Errorf("round %d: recorded attempt %+v, %v; want attempt %d with its error and next time", i, a, err, i+1)
			}
		}
		if p, g := e.hits.calls(); p != 4 || g != 4 {
			t.Errorf("provider: %d POST %d GET, want 4 and 4", p, g)
		}
		if err := e.prov.SetMode(provider.ModeOK); err != nil {
			t.Fatal(err)
		}
		if rep, err := w.RunOnce(e.ctx); err != nil || rep != (Report{Reconciled: 1}) {
			t.Fatalf("RunOnce after the provider recovered = %+v, %v", rep, err)
		}
		e.reconciled(rec.OperationID, idem.StateSucceeded, registry.ReconcileReplay)
		w.mu.Lock()
		_, ok := w.retry[rec.OperationID]
		w.mu.Unlock()
		if ok {
			t.Error("the settled operation is still scheduled")
		}
		if _, err := registry.LastRecoveryAttempt(e.ctx, e.store, rec.OperationID); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("the settled operation's recorded attempts: %v; want them deleted", err)
		}
	})
}

// TestRenderError: a Renderer that fails leaves the operation UNKNOWN and
// is reported as the round's error; the other operations are settled.
func TestRenderError(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		bad, _ := e.executing(e.claim("recovery.badrender"), true)
		good, _ := e.executing(e.claim(opTransfer), true)
		e.setNow(base.Add(time.Hour))
		w := e.worker(e.store)
		errRender := errors.New("cannot render")
		w.Effects["recovery.badrender"] = &effect.Operation{
			Downstreams: w.Effects[opTransfer].Downstreams,
			Render: func(registry.Record, []registry.Effect) (registry.Outcome, error) {
				return registry.Outcome{}, errRender
			},
		}
		rep, err := w.RunOnce(e.ctx)
		if !errors.Is(err, errRender) || rep != (Report{Unknown: 2, Reconciled: 1, Unsettled: 1}) {
			t.Fatalf("RunOnce = %+v, %v; want the render error and one settled", rep, err)
		}
		if got := e.get(bad.Scope); got.State != idem.StateUnknown || got.Response != nil {
			t.Errorf("badly rendered record: %s %+v, want UNKNOWN", got.State, got.Response)
		}
		if got := e.get(good.Scope); got.State != idem.StateSucceeded {
			t.Errorf("other record: %s, want SUCCEEDED", got.State)
		}
	})
}

// winners is a Store that counts the TakeOver calls that won, by
// operation ID.
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

// race runs RunOnce on n workers at once and returns the sum of their
// reports, failing on any error.
func race(t *testing.T, n int, mk func() *Worker) Report {
	t.Helper()
	reps := make([]Report, n)
	errs := make([]error, n)
	ws := make([]*Worker, n)
	for i := range n {
		ws[i] = mk()
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			reps[i], errs[i] = ws[i].RunOnce(t.Context())
		})
	}
	close(start)
	wg.Wait()
	var total Report
	for i := range n {
		if errs[i] != nil {
			t.Errorf("worker %d: %v", i, errs[i])
		}
		total = total.Add(reps[i])
	}
	return total
}

// TestConcurrentWorkers: workers racing on the same registry take every
// expired EXECUTING record over exactly once and mark it UNKNOWN, never
// touch an expired RESERVED record, and then settle each UNKNOWN operation
// exactly once, the provider executing each key once.
func TestConcurrentWorkers(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		const executing, reserved, workers = 8, 3, 4
		var execs, ress []registry.Record
		for i := range executing {
			rec, _ := e.executing(e.claim(opTransfer), i%2 == 0)
			execs = append(execs, rec)
		}
		for range reserved {
			ress = append(ress, e.reserve(e.claim(opTransfer)))
		}
		e.setNow(base.Add(time.Hour))
		hist := &winners{Store: e.store, won: map[string]int{}}

		// Without effects: take over and mark UNKNOWN only.
		total := race(t, workers, func() *Worker {
			w := e.worker(hist)
			w.Effects = nil
			w.Batch = 2
			return w
		})
		if total.Unknown != executing || total.Recovered != 0 || total.Reconciled != 0 || total.Unsettled < executing {
			t.Errorf("reports sum to %+v, want %d unknown and at least as many unsettled", total, executing)
		}
		for i, r := range execs {
			if hist.won[r.OperationID] != 1 {
				t.Errorf("record %d taken over %d times, want once", i, hist.won[r.OperationID])
			}
			if got := e.get(r.Scope); got.State != idem.StateUnknown || got.OwnerGen != 2 || got.OperationID != r.OperationID {
				t.Errorf("record %d: %s gen %d, want UNKNOWN gen 2", i, got.State, got.OwnerGen)
			}
		}
		for i, r := range ress {
			if got := e.get(r.Scope); hist.won[r.OperationID] != 0 || got.State != idem.StateReserved || got.OwnerGen != 1 || got.OperationID != r.OperationID {
				t.Errorf("reservation %d: %s %s gen %d, taken over %d times; want it untouched",
					i, got.OperationID, got.State, got.OwnerGen, hist.won[r.OperationID])
			}
		}
		if e.prov.Executed() != executing/2 {
			t.Errorf("provider executed %d, want %d", e.prov.Executed(), executing/2)
		}

		// With effects: each UNKNOWN operation settled exactly once.
		total = race(t, workers, func() *Worker { return e.worker(hist) })
		if want := (Report{Reconciled: executing}); total != want {
			t.Errorf("settling reports sum to %+v, want %+v", total, want)
		}
		for i, r := range execs {
			if got := e.get(r.Scope); got.State != idem.StateSucceeded || got.OwnerGen != 2 {
				t.Errorf("record %d: %s gen %d, want SUCCEEDED gen 2", i, got.State, got.OwnerGen)
			}
			if i%2 == 0 { // executed before: every lookup finds it
				e.reconciled(r.OperationID, idem.StateSucceeded, registry.ReconcileProvider)
			} else { // a racing worker's lookup may find another's re-send
				e.reconciled(r.OperationID, idem.StateSucceeded, registry.ReconcileReplay, registry.ReconcileProvider)
			}
			if hist.won[r.OperationID] != 1 {
				t.Errorf("record %d taken over %d times, want once", i, hist.won[r.OperationID])
			}
		}
		by := e.outbox()
		for _, r := range execs {
			checkOutbox(t, by, r.OperationID, "transfer.executed", "transfer.settled")
		}
		if e.prov.Executed() != executing {
			t.Errorf("provider executed %d, want %d", e.prov.Executed(), executing)
		}
	})
}

// TestNoStarvation: operations that cannot be settled (no effects
// configured: an operator's) never hide newer ones. With a listing page
// of one, the oldest UNKNOWN operation is an orphan; the newer transfer,
// which the provider executed, is still settled in the same round.
func TestNoStarvation(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		orphan, _ := e.executing(e.claim(opOrphan), false)
		if _, err := e.store.MarkUnknown(e.ctx, orphan); err != nil {
			t.Fatal(err)
		}
		e.setNow(base.Add(time.Second))
		newer, _ := e.executing(e.claim(opTransfer), true)
		if _, err := e.store.MarkUnknown(e.ctx, newer); err != nil {
			t.Fatal(err)
		}
		w := e.worker(e.store)
		w.UnknownBatch = 1
		rep, err := w.RunOnce(e.ctx)
		if err != nil || rep.Reconciled != 1 || rep.Unsettled != 1 {
			t.Errorf("RunOnce: %+v, %v; want the newer transfer reconciled and the orphan unsettled", rep, err)
		}
		if got := e.get(newer.Scope); got.State != idem.StateSucceeded {
			t.Errorf("newer transfer %s is %s; want SUCCEEDED", got.OperationID, got.State)
		}
		if got := e.get(orphan.Scope); got.State != idem.StateUnknown {
			t.Errorf("orphan %s is %s; want UNKNOWN", got.OperationID, got.State)
		}
	})
}

// listFails is a store whose every listing fails with its context's error.
type listFails struct{ registry.Store }

func (listFails) ListOperations(ctx context.Context, _ registry.ListFilter) ([]registry.Record, error) {
	return nil, ctx.Err()
}

// TestRunNegativeInterval: Run takes an interval <= 0 as DefaultInterval,
// as documented (time.NewTicker panics on one).
func TestRunNegativeInterval(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w := &Worker{Store: listFails{}, UnknownBatch: -1}
	w.Run(ctx, -time.Second) // returns at once: ctx has ended
}
