package operation_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// TestTraceReplayFromCache: a run the replay cache answered — a replay,
// or a conflict of another request with the key — says so on its
// idem.run span (idem.cached true) and has no idem.reserve span, since
// the registry was not read; the replay that read the registry (and
// filled the cache) has its idem.reserve and no idem.cached.
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
	other := req
	other.Fingerprint = idem.Fingerprint{2}
	door := operation.ExecuteFunc(func(context.Context, registry.Tx, registry.Record) (operation.Answer, error) {
		return operation.Answer{Status: 201, State: cfg.StateFor(201, true),
			Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte("created")}}, nil
	})
	for i, c := range []struct {
		req     operation.Request
		kind    operation.Kind
		reserve int    // idem.reserve spans of the run
		cached  string // its idem.run's idem.cached
	}{
		{req, operation.Executed, 1, ""},
		{req, operation.Replayed, 1, ""},      // from the registry; fills the cache
		{req, operation.Replayed, 0, "true"},  // from the cache
		{other, operation.Refused, 0, "true"}, // a conflict, from the cache
	} {
		runCtx, span := tp.Tracer("test").Start(ctx, "request")
		res := core.Run(runCtx, c.req, door)
		span.End()
		if res.Kind != c.kind {
			t.Fatalf("request %d: %v, want %v", i+1, res.Kind, c.kind)
		}
		var run []sdktrace.ReadOnlySpan
		reserve := 0
		for _, s := range sr.Ended() {
			if s.SpanContext().TraceID() != span.SpanContext().TraceID() {
				continue
			}
			switch s.Name() {
			case operation.SpanRun:
				run = append(run, s)
			case operation.SpanReserve:
				reserve++
			}
		}
		if len(run) != 1 || reserve != c.reserve {
			t.Fatalf("request %d: %d %s and %d %s spans, want 1 and %d", i+1, len(run), operation.SpanRun, reserve, operation.SpanReserve, c.reserve)
		}
		cached := ""
		for _, kv := range run[0].Attributes() {
			if kv.Key == "idem.cached" {
				cached = kv.Value.Emit()
			}
		}
		if cached != c.cached {
			t.Errorf("request %d: idem.run has idem.cached %q, want %q", i+1, cached, c.cached)
		}
	}
	if st := core.ReplayCacheStats(); st.Hits != 2 {
		t.Errorf("replay cache stats %+v, want 2 hits", st)
	}
}
