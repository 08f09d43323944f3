package recovery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
)

// TestRecoveryTraced: a worker with a tracer provider takes over an
// expired execution whose effect began but was never sent, in a root span
// idem.recovery.takeover (outcome unknown, generation 1 → 2), and
// settles it in idem.recovery.settle (reconciled, SUCCEEDED) with its
// lookup and re-send as children; the provider got both calls with a
// traceparent naming those spans; idem_unknown_settle_seconds carries an
// exemplar with the settlement's trace_id; no span holds the operation
// ID, the downstream key or the request. threat:trace-leaks-key
func TestRecoveryTraced(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		var mu sync.Mutex
		var calls []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls = append(calls, r.Method+" "+r.Header.Get("Traceparent"))
			mu.Unlock()
			e.prov.Handler().ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)

		rec, eff := e.executing(e.claim(opTransfer), false)
		e.setNow(base.Add(time.Hour))
		w := e.worker(e.store)
		w.TracerProvider = tp
		w.Effects = effect.Set{opTransfer: {Downstreams: map[string]effect.Downstream{
			effName: &payments.ProviderClient{BaseURL: srv.URL, Propagator: propagation.TraceContext{}}}, Render: render}}
		reg := prometheus.NewRegistry()
		w.Metrics = NewMetrics(reg)
		if rep, err := w.RunOnce(e.ctx); err != nil || rep != (Report{Unknown: 1, Reconciled: 1}) {
			t.Fatalf("RunOnce = %+v, %v", rep, err)
		}

		spans := sr.Ended()
		find := func(name string) sdktrace.ReadOnlySpan {
			t.Helper()
			var found []sdktrace.ReadOnlySpan
			for _, s := range spans {
				if s.Name() == name {
					found = append(found, s)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d spans %s, want 1", len(found), name)
			}
			return found[0]
		}
		attrs := func(s sdktrace.ReadOnlySpan) string {
			var out []string
			for _, kv := range s.Attributes() {
				out = append(out, string(kv.Key)+"="+kv.Value.Emit())
			}
			return strings.Join(out, " ")
		}
		take, settle := find(SpanTakeOver), find(SpanSettle)
		if got, want := attrs(take), "idem.operation="+opTransfer+" idem.generation=2 idem.previous_generation=1 idem.state=UNKNOWN idem.outcome=unknown"; !sameAttrs(got, want) {
			t.Errorf("%s: %s, want %s", SpanTakeOver, got, want)
		}
		if got, want := attrs(settle), "idem.operation="+opTransfer+" idem.generation=2 idem.outcome=reconciled idem.state=SUCCEEDED"; !sameAttrs(got, want) {
			t.Errorf("%s: %s, want %s", SpanSettle, got, want)
		}
		if take.Parent().IsValid() || settle.Parent().IsValid() {
			t.Errorf("the worker's spans have parents: %v %v", take.Parent(), settle.Parent())
		}
		lookup, send := find(effect.SpanLookup), find(effect.SpanSend)
		for _, s := range []sdktrace.ReadOnlySpan{lookup, send} {
			if s.Parent().SpanID() != settle.SpanContext().SpanID() {
				t.Errorf("%s is not a child of %s", s.Name(), SpanSettle)
			}
		}
		tparent := func(s sdktrace.ReadOnlySpan) string {
			return fmt.Sprintf("00-%s-%s-01", s.SpanContext().TraceID(), s.SpanContext().SpanID())
		}
		mu.Lock()
		got := fmt.Sprint(calls)
		mu.Unlock()
		if want := fmt.Sprint([]string{"GET " + tparent(lookup), "POST " + tparent(send)}); got != want {
			t.Errorf("the provider got %s, want %s", got, want)
		}

		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		exemplar := ""
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, b := range m.GetHistogram().GetBucket() {
					for _, l := range b.GetExemplar().GetLabel() {
						if l.GetName() == "trace_id" {
							exemplar = l.GetValue()
						}
					}
				}
			}
		}
		if exemplar != settle.SpanContext().TraceID().String() {
			t.Errorf("idem_unknown_settle_seconds exemplar trace_id %q, want the settlement's %s", exemplar, settle.SpanContext().TraceID())
		}
		for _, s := range spans {
			all := s.Name() + " " + attrs(s) + " " + s.Status().Description
			for _, secret := range []string{rec.OperationID, eff.DownstreamKey, string(eff.Request)} {
				if strings.Contains(all, secret) {
					t.Errorf("span %s holds %q", s.Name(), secret)
				}
			}
		}
		if got := e.get(rec.Scope); got.OwnerGen != 2 {
			t.Errorf("record generation %d, want 2", got.OwnerGen)
		}
	})
}

// sameAttrs reports whether two space-separated attribute lists hold the
// same attributes in any order.
func sameAttrs(a, b string) bool {
	x, y := strings.Fields(a), strings.Fields(b)
	if len(x) != len(y) {
		return false
	}
	seen := map[string]int{}
	for _, s := range x {
		seen[s]++
	}
	for _, s := range y {
		if seen[s]--; seen[s] < 0 {
			return false
		}
	}
	return true
}
