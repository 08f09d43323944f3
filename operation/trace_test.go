package operation_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// TestTraceReplayFromCache: a replay answered from the replay cache says
// so on its idem.replay span (idem.cached true) and has no idem.reserve
// span, since the registry was not read; the replay that read the
// registry (and filled the cache) has its idem.reserve and no
// idem.cached.
func TestTraceReplayFromCache(t *testing.T) {
	ctx := t.Context()
	store, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	cfg := &operation.Config{Name: "orders.create", APIRevision: "v1", ReplayCache: operation.ReplayCache{Entries: 10}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	core := operation.NewCore(operation.Core{Store: store, Config: cfg, TracerProvider: tp})
	id := idem.Identity{Tenant: "t1", Principal: "p1"}
	k, err := idem.ParseKey([]string{"trace-cache-1"}, idem.KeyPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	req := operation.Request{Identity: id, Scope: idem.ScopeOf(id, cfg.Name, cfg.ScopeRevision(), k), Fingerprint: idem.Fingerprint{1}}
	door := operation.ExecuteFunc(func(context.Context, registry.Tx, registry.Record) (operation.Answer, error) {
		return operation.Answer{Status: 201, State: cfg.StateFor(201, true),
			Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte("created")}}, nil
	})
	var traces []trace.TraceID
	for i, want := range []operation.Kind{operation.Executed, operation.Replayed, operation.Replayed} {
		runCtx, span := tp.Tracer("test").Start(ctx, "request")
		traces = append(traces, span.SpanContext().TraceID())
		if res := core.Run(runCtx, req, door); res.Kind != want {
			t.Fatalf("request %d: %v, want %v", i+1, res.Kind, want)
		}
		span.End()
	}
	if st := core.ReplayCacheStats(); st.Hits != 1 {
		t.Fatalf("replay cache stats %+v, want 1 hit", st)
	}
	spansOf := func(tr trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
		out := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range sr.Ended() {
			if s.SpanContext().TraceID() == tr {
				out[s.Name()] = append(out[s.Name()], s)
			}
		}
		return out
	}
	cachedAttr := func(s sdktrace.ReadOnlySpan) string {
		for _, kv := range s.Attributes() {
			if kv.Key == "idem.cached" {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	for _, c := range []struct {
		i       int // the request: 1 replayed from the registry, 2 from the cache
		reserve int
		cached  string
	}{{1, 1, ""}, {2, 0, "true"}} {
		i, spans := c.i, spansOf(traces[c.i])
		if len(spans[operation.SpanReplay]) != 1 || len(spans[operation.SpanReserve]) != c.reserve {
			t.Fatalf("request %d: %d %s and %d %s spans, want 1 and %d", i+1,
				len(spans[operation.SpanReplay]), operation.SpanReplay, len(spans[operation.SpanReserve]), operation.SpanReserve, c.reserve)
		}
		if got := cachedAttr(spans[operation.SpanReplay][0]); got != c.cached {
			t.Errorf("request %d: idem.replay has idem.cached %q, want %q", i+1, got, c.cached)
		}
	}
}
