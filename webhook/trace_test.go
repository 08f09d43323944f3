package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/webhook"
)

// TestWebhookTraceparent: a signed delivery carrying a W3C traceparent
// (as idem's relay sends one) runs its handler in the sender's trace:
// the handler's context holds a span of that trace, under the receiver's
// idem.run, itself a child of the sender's span; the re-send's replay is
// in the same trace.
func TestWebhookTraceparent(t *testing.T) {
	ctx := context.Background()
	st, err := idemstore.Open(ctx, "sqlite:"+t.TempDir()+"/events.db", idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(ctx) })
	rc, err := webhook.New(ctx, webhook.Config{
		Store:     st,
		Operation: idemhttp.Operation{Name: "provider.events", APIRevision: "v1"},
		Verifier:  &webhook.Verifier{Secrets: [][]byte{oldSecret}},
		Sender:    idem.Identity{Principal: "provider"},
		Options:   idemhttp.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan trace.SpanContext, 2)
	srv := httptest.NewServer(rc.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- trace.SpanContextFromContext(r.Context())
		w.Write([]byte(`{"ok":true}`))
	})))
	t.Cleanup(srv.Close)

	const traceID, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	body := []byte(`{"type":"transfer.settled"}`)
	for i := range 2 {
		h := signed(oldSecret, "msg_traced", time.Now(), body)
		h.Set("Traceparent", "00-"+traceID+"-"+parent+"-01")
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || (i == 1) != (resp.Header.Get(idemhttp.HeaderReplayed) == "true") {
			t.Fatalf("delivery %d: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
	if sc := <-seen; sc.TraceID().String() != traceID || !sc.IsValid() {
		t.Errorf("the handler's span context %v, want one in trace %s", sc, traceID)
	}
	runs := 0
	for _, s := range sr.Ended() {
		if s.SpanContext().TraceID().String() != traceID {
			t.Errorf("span %s in trace %s, want the sender's %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
		if s.Name() == "idem.run" {
			runs++
			if s.Parent().SpanID().String() != parent {
				t.Errorf("idem.run's parent %s, want the sender's span %s", s.Parent().SpanID(), parent)
			}
		}
	}
	if runs != 2 {
		t.Errorf("%d idem.run spans, want 2 (the delivery and its re-send)", runs)
	}
}
