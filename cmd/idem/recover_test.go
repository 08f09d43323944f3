package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/recovery"
	"github.com/idemkit/idem/registry"
)

// transferRequest is the provider request stored with the transfer
// effect of rec.
func transferRequest(rec registry.Record) []byte {
	return []byte(`{"amount":"2.00","currency":"EUR","payee":"acct_9","reference":"` + rec.OperationID + `"}`)
}

// abandoned stores, an hour in the past, a transfer reservation and — if
// begun — its begun provider effect, as left by an owner that crashed;
// sent says whether the transfer reached the provider at prov under its
// downstream key (and was executed there).
func abandoned(t *testing.T, dsn string, prov string, begun, sent bool) registry.Record {
	t.Helper()
	store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := registry.Claim{Operation: payments.OperationTransfer}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rec, created, err := store.Reserve(t.Context(), c)
	if err != nil || !created {
		t.Fatalf("Reserve: %v %v", created, err)
	}
	if !begun {
		return rec
	}
	eff, err := store.BeginEffect(t.Context(), rec, payments.EffectTransfer, transferRequest(rec))
	if err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	if sent {
		p := &payments.ProviderClient{BaseURL: prov}
		if a := p.Send(t.Context(), eff.DownstreamKey, eff.Request); a.Kind != effect.Executed {
			t.Fatalf("sending the transfer: %+v", a)
		}
	}
	return rec
}

// openStore opens the registry at dsn for the test's checks.
func openStore(t *testing.T, dsn string) registry.Store {
	t.Helper()
	store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store
}

// recoverJSON runs "idem recover --once --json" with args and decodes its
// one line, which must have exactly the four counts.
func recoverJSON(t *testing.T, args ...string) map[string]int {
	t.Helper()
	code, out, stderr := runCmd(t, "", append([]string{"recover", "--once", "--json"}, args...)...)
	var got map[string]int
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || len(got) != 4 || strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("recover %q: code %d, out %q, stderr %q", args, code, out, stderr)
	}
	return got
}

func counts(recovered, unknown, reconciled, unsettled int) map[string]int {
	return map[string]int{"recovered": recovered, "unknown": unknown, "reconciled": reconciled, "unsettled": unsettled}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// reconciledBy checks the one reconciliation of opID.
func reconciledBy(t *testing.T, store registry.Store, opID, method string, state idem.State) {
	t.Helper()
	logs, err := store.Reconciliations(t.Context(), opID)
	if err != nil || len(logs) != 1 || logs[0].Method != method || logs[0].Actor != recovery.Actor || logs[0].Outcome != state {
		t.Errorf("reconciliations of %s: %+v, %v; want one %s by %s to %s", opID, logs, err, method, recovery.Actor, state)
	}
}

// TestRecoverOnce: one round settles, from the provider's answers, the
// transfers whose owner crashed after beginning the provider call — the
// executed one by lookup, the unsent one by re-sending its stored request
// with the same key — storing payments.RenderTransfer's outcome and
// messages; an abandoned reservation is left for the client's retry.
func TestRecoverOnce(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		prov := provider.New()
		srv := httptest.NewServer(prov.Handler())
		t.Cleanup(srv.Close)
		reserved := abandoned(t, dsn, srv.URL, false, false)
		done := abandoned(t, dsn, srv.URL, true, true)
		lost := abandoned(t, dsn, srv.URL, true, false)
		if prov.Executed() != 1 {
			t.Fatalf("setup: provider executed %d", prov.Executed())
		}

		if got := recoverJSON(t, "--db", dsn, "--provider", srv.URL, "--batch", "1"); !equalCounts(got, counts(0, 2, 2, 0)) {
			t.Errorf("recover --json = %v, want %v", got, counts(0, 2, 2, 0))
		}
		store := openStore(t, dsn)
		if rec, err := store.Get(t.Context(), reserved.Scope); err != nil || rec.State != idem.StateReserved ||
			rec.OperationID != reserved.OperationID || rec.OwnerGen != 1 {
			t.Errorf("abandoned reservation: %s %s gen %d, %v; want it untouched", rec.OperationID, rec.State, rec.OwnerGen, err)
		}
		for _, c := range []struct {
			rec    registry.Record
			method string
		}{{done, registry.ReconcileProvider}, {lost, registry.ReconcileReplay}} {
			rec, err := store.Get(t.Context(), c.rec.Scope)
			if err != nil || rec.State != idem.StateSucceeded || rec.OwnerGen != 2 || rec.Response == nil {
				t.Errorf("%s transfer: %s gen %d %v", c.method, rec.State, rec.OwnerGen, err)
				continue
			}
			effs, err := store.Effects(t.Context(), rec.OperationID)
			if err != nil || len(effs) != 1 || effs[0].Result != registry.EffectSucceeded {
				t.Fatalf("effects %+v %v", effs, err)
			}
			answer, ok := prov.Transfer(effs[0].DownstreamKey)
			if !ok || !bytes.Equal(effs[0].Answer, answer) {
				t.Errorf("stored answer %q, provider has %q", effs[0].Answer, answer)
			}
			var tr payments.Transfer
			resp := rec.Response
			if resp.Status != http.StatusCreated || resp.Location != "/v1/transfers/"+payments.TransferID(rec.OperationID) ||
				json.Unmarshal(resp.Body, &tr) != nil || tr.ID != payments.TransferID(rec.OperationID) ||
				tr.ProviderTransfer != effs[0].Handle || tr.Amount != "2.00" || tr.Payee != "acct_9" {
				t.Errorf("%s transfer response: %d %s %s", c.method, resp.Status, resp.Location, resp.Body)
			}
			reconciledBy(t, store, rec.OperationID, c.method, idem.StateSucceeded)
		}
		msgs, err := store.ClaimOutbox(t.Context(), 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		topics := map[string][]string{}
		for _, m := range msgs {
			topics[m.OperationID] = append(topics[m.OperationID], m.Topic)
		}
		for _, id := range []string{done.OperationID, lost.OperationID} {
			if got := strings.Join(topics[id], ","); got != payments.TopicTransferCreated+","+payments.TopicTransferSettled {
				t.Errorf("outbox of %s: %s", id, got)
			}
		}
		if prov.Executed() != 2 {
			t.Errorf("provider executed %d transfers, want 2 (each once)", prov.Executed())
		}

		code, out, stderr := runCmd(t, "", "recover", "--db", dsn, "--provider", srv.URL, "--once")
		if code != exitOK || out != "recovered 0, unknown 0, reconciled 0, unsettled 0\n" {
			t.Errorf("second recover: code %d, out %q, stderr %q", code, out, stderr)
		}
	})
}

// TestRecoverUnsettled: while the provider fails, the transfer stays
// UNKNOWN and the round reports it unsettled (exit 0); a later round,
// once the provider answers, settles it, executed once.
func TestRecoverUnsettled(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		prov := provider.New()
		srv := httptest.NewServer(prov.Handler())
		t.Cleanup(srv.Close)
		lost := abandoned(t, dsn, srv.URL, true, false)
		if err := prov.SetMode(provider.ModeFail); err != nil {
			t.Fatal(err)
		}
		if got := recoverJSON(t, "--db", dsn, "--provider", srv.URL); !equalCounts(got, counts(0, 1, 0, 1)) {
			t.Errorf("recover with a failing provider = %v", got)
		}
		store := openStore(t, dsn)
		if rec, err := store.Get(t.Context(), lost.Scope); err != nil || rec.State != idem.StateUnknown || rec.Response != nil {
			t.Errorf("after a failing provider: %s %v, want UNKNOWN", rec.State, err)
		}
		if prov.Executed() != 0 {
			t.Errorf("provider executed %d", prov.Executed())
		}
		if err := prov.SetMode(provider.ModeOK); err != nil {
			t.Fatal(err)
		}
		if got := recoverJSON(t, "--db", dsn, "--provider", srv.URL); !equalCounts(got, counts(0, 0, 1, 0)) {
			t.Errorf("recover with a healthy provider = %v", got)
		}
		if rec, err := store.Get(t.Context(), lost.Scope); err != nil || rec.State != idem.StateSucceeded {
			t.Errorf("after a healthy provider: %s %v, want SUCCEEDED", rec.State, err)
		}
		reconciledBy(t, store, lost.OperationID, registry.ReconcileReplay, idem.StateSucceeded)
		if prov.Executed() != 1 {
			t.Errorf("provider executed %d, want 1", prov.Executed())
		}
	})
}

// TestRecoverDeclined: a provider that declines the key for good (422
// DECLINED) settles the transfer FAILED_FINAL with the rendered 422
// TRANSFER_DECLINED.
func TestRecoverDeclined(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodPost {
				w.WriteHeader(http.StatusUnprocessableEntity)
				w.Write([]byte(`{"code":"DECLINED"}`))
				return
			}
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":"NOT_FOUND"}`))
		}))
		t.Cleanup(srv.Close)
		rec := abandoned(t, dsn, srv.URL, true, false)
		if got := recoverJSON(t, "--db", dsn, "--provider", srv.URL); !equalCounts(got, counts(0, 1, 1, 0)) {
			t.Errorf("recover = %v", got)
		}
		store := openStore(t, dsn)
		got, err := store.Get(t.Context(), rec.Scope)
		if err != nil || got.State != idem.StateFailedFinal || got.Response == nil || got.Response.Status != http.StatusUnprocessableEntity ||
			!strings.Contains(string(got.Response.Body), string(payments.CodeTransferDeclined)) {
			t.Fatalf("declined transfer: %s %+v %v", got.State, got.Response, err)
		}
		reconciledBy(t, store, rec.OperationID, registry.ReconcileReplay, idem.StateFailedFinal)
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine;
// seen is closed once the output contains want.
type syncBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	if s.want != "" && strings.Contains(s.b.String(), s.want) {
		s.once.Do(func() { close(s.seen) })
	}
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRecoverLoop: without --once, rounds run until the context ends; a
// round that did something prints its line. Without a provider an
// abandoned transfer is marked UNKNOWN, for an operator.
func TestRecoverLoop(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		rec := abandoned(t, dsn, "", true, false)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		out := &syncBuffer{want: "recovered 0, unknown 1, reconciled 0, unsettled 1\n", seen: make(chan struct{})}
		var errb syncBuffer
		exited := make(chan int, 1)
		go func() {
			exited <- run(ctx, []string{"recover", "--db", dsn, "--interval", "20ms"}, stdio{in: strings.NewReader(""), out: out, err: &errb})
		}()
		select {
		case <-out.seen:
		case code := <-exited:
			t.Fatalf("recover exited %d before reporting; out %q, stderr %q", code, out.String(), errb.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("no round reported; out %q, stderr %q", out.String(), errb.String())
		}
		cancel()
		select {
		case code := <-exited:
			if code != exitOK {
				t.Errorf("recover exited %d, want 0; stderr %q", code, errb.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("recover did not stop on cancel")
		}
		if !strings.HasPrefix(out.String(), out.want) {
			t.Errorf("output %q, want it to start with %q", out.String(), out.want)
		}
		store := openStore(t, dsn)
		if got, err := store.Get(t.Context(), rec.Scope); err != nil || got.State != idem.StateUnknown || got.OwnerGen != 2 {
			t.Errorf("state %s gen %d %v, want UNKNOWN gen 2", got.State, got.OwnerGen, err)
		}
	})
}

func TestRecoverUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"recover", "--batch", "0"},
		{"recover", "--interval", "0s"},
		{"recover", "--lease", "-1s"},
		{"recover", "--provider-timeout", "soon"},
		{"recover", "extra"},
		{"recover", "--nope"},
	} {
		if code, _, _ := runCmd(t, "", args...); code != exitUsage {
			t.Errorf("%q: code %d, want %d", args, code, exitUsage)
		}
	}
}
