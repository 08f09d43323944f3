package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// Effect-bearing operations in the one-transaction style: two durable
// commits per execution (operation/onetxeffects.go).

// oneTx makes the effBench's operation one-transaction.
func oneTx(mw *idemhttp.Middleware) { mw.Operation.OneTransaction = true }

// writeCounter is the bench's real store with its write calls counted.
type writeCounter struct {
	registry.Store
	reserve, begin, record, complete, reserveEffect, completeEffects, markUnknown atomic.Int32
	// failComplete, when set, makes CompleteEffects fail with it, writing
	// nothing: an outcome whose commit failed.
	failComplete error
}

func (s *writeCounter) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	s.reserve.Add(1)
	return s.Store.Reserve(ctx, c)
}

func (s *writeCounter) BeginEffect(ctx context.Context, rec registry.Record, name string, request []byte) (registry.Effect, error) {
	s.begin.Add(1)
	return s.Store.BeginEffect(ctx, rec, name, request)
}

func (s *writeCounter) RecordEffect(ctx context.Context, rec registry.Record, name, handle, result string, answer []byte) error {
	s.record.Add(1)
	return s.Store.RecordEffect(ctx, rec, name, handle, result, answer)
}

func (s *writeCounter) Complete(ctx context.Context, rec registry.Record, fn registry.BusinessFunc) (registry.Record, error) {
	s.complete.Add(1)
	return s.Store.Complete(ctx, rec, fn)
}

func (s *writeCounter) ReserveEffect(ctx context.Context, c registry.Claim, name string, request []byte) (registry.Result, registry.Effect, error) {
	s.reserveEffect.Add(1)
	return s.Store.ReserveEffect(ctx, c, name, request)
}

func (s *writeCounter) CompleteEffects(ctx context.Context, rec registry.Record, answers []registry.EffectAnswer, out registry.Outcome) (registry.Record, error) {
	s.completeEffects.Add(1)
	if s.failComplete != nil {
		return registry.Record{}, s.failComplete
	}
	return s.Store.CompleteEffects(ctx, rec, answers, out)
}

func (s *writeCounter) MarkUnknown(ctx context.Context, rec registry.Record) (registry.Record, error) {
	s.markUnknown.Add(1)
	return s.Store.MarkUnknown(ctx, rec)
}

// counted returns a shape that counts the bench's writes in w.
func counted(w *writeCounter) func(*idemhttp.Middleware) {
	return func(mw *idemhttp.Middleware) { w.Store = mw.Store; mw.Store = w }
}

// TestEffectOneTxTwoCommits: a transfer in the one-transaction style
// writes the registry twice — ReserveEffect before the call (record and
// attempt), CompleteEffects after it (answer and outcome) — and nothing
// else: no reservation, no BeginEffect, no RecordEffect, no Complete. The
// stored record, attempt and outbox are those of the two-phase style
// (TestEffectExecuted checks them in both styles).
func TestEffectOneTxTwoCommits(t *testing.T) {
	pgtest.EachDriver(t, "eff.db", func(t *testing.T, _, dsn string) {
		w := &writeCounter{}
		b := newEffBench(t, dsn, oneTx, counted(w))
		first := b.post(t, "k-two", "send")
		if res := b.result(); res != "ok" || first.status != http.StatusCreated {
			t.Fatalf("Effect %s, response %v; want ok and 201", res, first)
		}
		got := []int32{w.reserve.Load(), w.begin.Load(), w.record.Load(), w.complete.Load(), w.reserveEffect.Load(), w.completeEffects.Load()}
		if want := []int32{0, 0, 0, 0, 1, 1}; !equalInts(got, want) {
			t.Errorf("writes Reserve, BeginEffect, RecordEffect, Complete, ReserveEffect, CompleteEffects = %v, want %v", got, want)
		}
		eff := b.effect(t, first.op())
		if eff.Result != registry.EffectSucceeded || eff.Handle != "h-1" || eff.Answer == nil {
			t.Errorf("stored attempt %+v: the answer did not commit with the outcome", eff)
		}
	})
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEffectOneTxLostRaceSendsNothing: two servers (two Cores, as two
// processes) on one registry run the handler for the same key, each
// having found no record. The first Effect stores the record and its
// attempt and calls the downstream; the second Effect finds the scope
// taken: it writes nothing — no record, no attempt under its operation
// ID — sends NOTHING downstream, and its request is answered from the
// record that won (409 IN_PROGRESS while the first call runs), never with
// its handler's own answer.
// threat:effect-lost-race-sends-nothing
func TestEffectOneTxLostRaceSendsNothing(t *testing.T) {
	pgtest.EachDriver(t, "eff.db", func(t *testing.T, _, dsn string) {
		b := newEffBench(t, dsn, oneTx)
		b.gates = map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
		b.bank.setMode("hold")
		// A second server: another Core on the same store and handler.
		mw := &idemhttp.Middleware{Store: b.mw.Store, MonitorPrefix: b.mw.MonitorPrefix, Operation: b.mw.Operation, Identity: b.mw.Identity, Logger: b.mw.Logger}
		other := httptest.NewServer(mw.Handler(http.HandlerFunc(b.serve)))
		t.Cleanup(other.Close)
		t.Cleanup(func() { close(b.gates["a"]); close(b.gates["b"]) })

		first := b.asyncAt(b.srv.URL, "k-race", "gated", "a")
		opA := <-b.started
		second := b.asyncAt(other.URL, "k-race", "gated", "b")
		opB := <-b.started
		if opA == opB {
			t.Fatalf("both handlers saw operation %s", opA)
		}
		b.gates["a"] <- struct{}{} // the first stores its record and calls
		<-b.bank.held
		b.gates["b"] <- struct{}{} // the second finds the scope taken
		if res := b.result(); res != "scope taken" {
			t.Errorf("the second Effect: %s, want scope taken", res)
		}
		lost := <-second
		if lost.status != http.StatusConflict || lost.code() != idem.CodeInProgress || lost.op() != opA {
			t.Errorf("the second request: %v; want 409 IN_PROGRESS for %s", lost, opA)
		}
		if p, _ := b.bank.calls(); p != 1 {
			t.Errorf("%d POSTs downstream while the first is held, want 1: the loser sent", p)
		}
		if effs, err := b.store.Effects(t.Context(), opB); err != nil || len(effs) != 0 {
			t.Errorf("attempts under the loser's operation ID: %+v, %v; want none", effs, err)
		}
		if _, err := b.store.GetByID(t.Context(), opB); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("the loser's record: %v, want ErrNotFound", err)
		}
		close(b.bank.release)
		if res := b.result(); res != "ok" {
			t.Errorf("the first Effect: %s", res)
		}
		if won := <-first; won.status != http.StatusCreated || won.op() != opA {
			t.Errorf("the first request: %v; want 201 for %s", won, opA)
		}
		if p, _ := b.bank.calls(); p != 1 || b.bank.executed() != 1 {
			t.Errorf("%d POSTs, %d executed; want 1 and 1", p, b.bank.executed())
		}
		if again := b.post(t, "k-race", "send"); again.status != http.StatusCreated || again.op() != opA || !again.replayed() {
			t.Errorf("a retry: %v; want the replay of %s", again, opA)
		}
	})
}

// TestEffectOneTxAnswerKeptWhenOutcomeFails: the downstream answered
// definitely, but the transaction that would store the answer with the
// outcome fails (CompleteEffects refused, nothing written). The answer,
// held in memory, is stored on its own before the record is marked
// UNKNOWN: the client gets 409 OUTCOME_UNKNOWN, the attempt holds the
// downstream's answer, and a retry settles the operation from it
// without calling the downstream again — no POST, no lookup.
// threat:effect-answer-async-loss
func TestEffectOneTxAnswerKeptWhenOutcomeFails(t *testing.T) {
	pgtest.EachDriver(t, "eff.db", func(t *testing.T, _, dsn string) {
		w := &writeCounter{failComplete: registry.ErrUnavailable}
		b := newEffBench(t, dsn, oneTx, counted(w))
		first := b.post(t, "k-kept", "send")
		op := first.op()
		if res := b.result(); res != "ok" {
			t.Fatalf("Effect: %s", res)
		}
		unknown(t, "first call", first, op)
		eff := b.effect(t, op)
		if eff.Result != registry.EffectSucceeded || eff.Handle != "h-1" || eff.Answer == nil {
			t.Fatalf("attempt after the failed outcome: %+v; want the downstream's answer stored", eff)
		}
		if rec := b.record(t, op); rec.State != idem.StateUnknown {
			t.Fatalf("record %s, want UNKNOWN", rec.State)
		}
		w.failComplete = nil
		settled := b.post(t, "k-kept", "send")
		if settled.status != http.StatusCreated || settled.op() != op || !bytes.Equal(settled.body, thingBody(op, "h-1")) {
			t.Errorf("retry: %v; want the rendered 201 of %s", settled, op)
		}
		if p, g := b.bank.calls(); p != 1 || g != 0 {
			t.Errorf("%d POST %d GET; want 1 and 0: the stored answer is the evidence", p, g)
		}
	})
}

// asyncAt posts to the server at url in a goroutine, with the X-Gate
// header gate; the response (status -1 on a transport error) arrives on
// the channel.
func (b *effBench) asyncAt(url, key, mode, gate string) <-chan effResp {
	ch := make(chan effResp, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url+"/things", bytes.NewReader([]byte(`{"a":1}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Effect", mode)
		req.Header.Set("X-Gate", gate)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- effResp{status: -1, header: http.Header{}, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		ch <- effResp{resp.StatusCode, resp.Header, body}
	}()
	return ch
}
