package idemhttp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// traceIdentity is the caller of the traced requests: long enough that
// finding it in a span means it leaked.
var traceIdentity = idem.Identity{Tenant: "tenant-7f3c9a", Principal: "principal-b41d02"}

// tracer returns an SDK tracer provider that records every span in
// memory.
func tracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, sr
}

// tracedBench is newEffBench traced with tp, propagating W3C
// traceparent in (from the client) and out (to the bank), with
// traceIdentity as the caller.
func tracedBench(t *testing.T, dsn string, tp trace.TracerProvider) *effBench {
	return newEffBench(t, dsn, func(mw *idemhttp.Middleware) {
		mw.TracerProvider = tp
		mw.Propagator = propagation.TraceContext{}
		mw.Identity = func(*http.Request) (idem.Identity, error) { return traceIdentity, nil }
		d := mw.Operation.Effects.Downstreams["send"].(*payments.ProviderClient)
		mw.Operation.Effects.Downstreams["send"] = &payments.ProviderClient{BaseURL: d.BaseURL, Propagator: propagation.TraceContext{}}
	})
}

// doTraced is b.do with ctx's trace context sent as traceparent, as an
// instrumented client sends it on every attempt of its retry loop.
func (b *effBench) doTraced(ctx context.Context, key, mode string) effResp {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/things", bytes.NewReader([]byte(traceBody)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Effect", mode)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return effResp{status: -1, header: http.Header{}, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return effResp{resp.StatusCode, resp.Header, body}
}

const traceBody = `{"a":"body-9e21c4"}`

// spanOf finds the one span named name among spans that satisfies ok;
// it fails t unless there is exactly one.
func spanOf(t *testing.T, spans []sdktrace.ReadOnlySpan, name string, ok func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name && (ok == nil || ok(s)) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %s, want 1; spans:\n%s", len(found), name, dumpSpans(spans))
	}
	return found[0]
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func ended(s sdktrace.ReadOnlySpan) bool { return !s.EndTime().IsZero() }

func dumpSpans(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s span %s parent %s ended %v %v\n", s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID(), ended(s), s.Attributes())
	}
	return b.String()
}

// readable is every span sr saw started, as read-only spans.
func readable(sr *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Started() {
		out = append(out, s)
	}
	return out
}

// checkNoLeak fails t if a span's name, attribute, event or status holds
// one of secrets.
func checkNoLeak(t *testing.T, spans []sdktrace.ReadOnlySpan, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, kv := range s.Attributes() {
			texts = append(texts, string(kv.Key), kv.Value.Emit())
		}
		for _, e := range s.Events() {
			texts = append(texts, e.Name)
			for _, kv := range e.Attributes {
				texts = append(texts, string(kv.Key), kv.Value.Emit())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if secret != "" && strings.Contains(text, secret) {
					t.Errorf("span %s holds %q: %q", s.Name(), secret, text)
				}
			}
		}
	}
}

// TestTraceCrashAndHeal: a traced request whose first owner hangs inside
// its downstream call (a crashed process as the registry sees it: its
// lease runs out) and whose retry takes the operation over and settles
// it shows both owners' spans under the client's one trace: the first
// owner's idem.run, idem.reserve (generation 1), idem.execute,
// idem.effect.begin and the idem.downstream.send that never returned; the
// retry's idem.run (replayed, generation 2) with idem.takeover (from
// generation 1 to 2), idem.settle, the lookup and the re-send. Every call
// the bank got carried a traceparent of that trace naming the downstream
// span that made it. No span holds the key, the body, the identity, the
// operation ID or the downstream key. threat:trace-leaks-key
func TestTraceCrashAndHeal(t *testing.T) {
	pgtest.EachDriver(t, "trace.db", func(t *testing.T, _, dsn string) {
		tp, sr := tracer(t)
		b := tracedBench(t, dsn, tp)
		// The client's one trace around its attempts.
		ctx, client := tp.Tracer("client").Start(t.Context(), "client.create")
		defer client.End()
		traceID := client.SpanContext().TraceID()

		b.offset.Store(int64(-time.Hour)) // the first owner's lease ends an hour early by the real clock
		b.bank.setMode("hold")
		firstDone := make(chan effResp, 1)
		go func() { firstDone <- b.doTraced(ctx, "k-traced-5d1e", "send") }()
		<-b.bank.held // the first owner is inside its downstream call, and hangs there
		b.offset.Store(0)
		retry := b.doTraced(ctx, "k-traced-5d1e", "send")
		op := retry.op()
		if retry.status != http.StatusCreated || op == "" {
			t.Fatalf("retry after the lease expired: %v; want 201", retry)
		}
		if rec := b.record(t, op); rec.OwnerGen != 2 || rec.State != idem.StateSucceeded {
			t.Fatalf("record %s gen %d; want SUCCEEDED gen 2", rec.State, rec.OwnerGen)
		}

		spans := readable(sr)
		for _, s := range spans {
			if s.SpanContext().TraceID() != traceID {
				t.Errorf("span %s is in trace %s, not the client's %s", s.Name(), s.SpanContext().TraceID(), traceID)
			}
		}
		isFirst := func(s sdktrace.ReadOnlySpan) bool { return !ended(s) }
		isRetry := func(s sdktrace.ReadOnlySpan) bool { return ended(s) }
		firstRun := spanOf(t, spans, "idem.run", isFirst)
		retryRun := spanOf(t, spans, "idem.run", isRetry)
		childOf := func(p sdktrace.ReadOnlySpan) func(sdktrace.ReadOnlySpan) bool {
			return func(s sdktrace.ReadOnlySpan) bool { return s.Parent().SpanID() == p.SpanContext().SpanID() }
		}
		for _, run := range []sdktrace.ReadOnlySpan{firstRun, retryRun} {
			if run.Parent().SpanID() != client.SpanContext().SpanID() || attr(run, "idem.operation") != "things.send" {
				t.Errorf("%s: parent %s, operation %q; want the client's span %s and things.send", run.Name(), run.Parent().SpanID(),
					attr(run, "idem.operation"), client.SpanContext().SpanID())
			}
		}
		// The first owner: reserved, executing, its effect begun, its call
		// never answered — and its spans that ended were exported.
		if r := spanOf(t, spans, "idem.reserve", childOf(firstRun)); !ended(r) || attr(r, "idem.generation") != "1" || attr(r, "idem.state") != "RESERVED" {
			t.Errorf("first owner's idem.reserve: ended %v, %v", ended(r), r.Attributes())
		}
		exec1 := spanOf(t, spans, "idem.execute", childOf(firstRun))
		if ended(exec1) || attr(exec1, "idem.generation") != "1" {
			t.Errorf("first owner's idem.execute: ended %v, %v; want open, generation 1", ended(exec1), exec1.Attributes())
		}
		if eb := spanOf(t, spans, "idem.effect.begin", childOf(exec1)); !ended(eb) || attr(eb, "idem.effect") != "send" {
			t.Errorf("idem.effect.begin: ended %v, %v", ended(eb), eb.Attributes())
		}
		send1 := spanOf(t, spans, "idem.downstream.send", childOf(exec1))
		// The retry: took over from generation 1, settled, replayed.
		if attr(retryRun, "idem.outcome") != "replayed" || attr(retryRun, "idem.generation") != "2" || attr(retryRun, "idem.state") != "SUCCEEDED" {
			t.Errorf("retry's idem.run: %v; want replayed, generation 2, SUCCEEDED", retryRun.Attributes())
		}
		take := spanOf(t, spans, "idem.takeover", childOf(retryRun))
		if attr(take, "idem.previous_generation") != "1" || attr(take, "idem.generation") != "2" {
			t.Errorf("idem.takeover: %v; want generation 1 → 2", take.Attributes())
		}
		settle := spanOf(t, spans, "idem.settle", childOf(retryRun))
		lookup := spanOf(t, spans, "idem.downstream.lookup", childOf(settle))
		resend := spanOf(t, spans, "idem.downstream.send", childOf(settle))
		if attr(lookup, "idem.answer") != "not found" || attr(resend, "idem.answer") != "executed" {
			t.Errorf("lookup answered %q, re-send %q; want not found, executed", attr(lookup, "idem.answer"), attr(resend, "idem.answer"))
		}
		spanOf(t, spans, "idem.replay", childOf(retryRun))

		// W3C traceparent on every downstream call, naming its span.
		b.bank.mu.Lock()
		calls := append([]string(nil), b.bank.traces...)
		b.bank.mu.Unlock()
		want := []string{"POST " + traceparent(send1), "GET " + traceparent(lookup), "POST " + traceparent(resend)}
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Errorf("the bank got %q, want %q", calls, want)
		}

		close(b.bank.release) // the first owner's call returns; its writes are fenced
		<-firstDone
		spans = readable(sr)
		if s := spanOf(t, spans, "idem.downstream.send", func(s sdktrace.ReadOnlySpan) bool { return s.SpanContext().SpanID() == send1.SpanContext().SpanID() }); !ended(s) {
			t.Errorf("the first owner's idem.downstream.send did not end after its call returned")
		}
		checkNoLeak(t, spans, "k-traced-5d1e", traceBody, `body-9e21c4`, traceIdentity.Tenant, traceIdentity.Principal,
			op, registry.DownstreamKey(op, "send"), string(thingRequest(op)))
	})
}

// traceparent is the W3C traceparent header that names span s.
func traceparent(s sdktrace.ReadOnlySpan) string {
	h := http.Header{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), s.SpanContext()), propagation.HeaderCarrier(h))
	return h.Get("Traceparent")
}

// TestTraceExemplar: a request whose trace is sampled observes
// idem_reservation_seconds with an exemplar carrying its trace_id.
func TestTraceExemplar(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		tp, _ := tracer(t)
		f := newFixtureWith(t, store, idemhttp.Enforce, func(mw *idemhttp.Middleware) {
			mw.TracerProvider = tp
			mw.Propagator = propagation.TraceContext{}
		})
		ctx, client := tp.Tracer("client").Start(t.Context(), "client.create")
		defer client.End()
		h := http.Header{}
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
		if r := f.post("k-exemplar", `{}`, "Traceparent", h.Get("Traceparent")); r.status != http.StatusCreated {
			t.Fatalf("traced request: %d %s", r.status, r.body)
		}
		want := client.SpanContext().TraceID().String()
		if got := exemplarTraces(t, f); !got[want] {
			t.Errorf("idem_reservation_seconds exemplars %v; want trace_id %s", got, want)
		}
	})
}

// exemplarTraces returns the trace_id of every exemplar of f's
// idem_reservation_seconds histogram.
func exemplarTraces(t *testing.T, f *fixture) map[string]bool {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "idem_reservation_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, bk := range m.GetHistogram().GetBucket() {
				addExemplar(got, bk.GetExemplar())
			}
		}
	}
	return got
}

func addExemplar(got map[string]bool, e *dto.Exemplar) {
	for _, l := range e.GetLabel() {
		if l.GetName() == "trace_id" {
			got[l.GetValue()] = true
		}
	}
}
