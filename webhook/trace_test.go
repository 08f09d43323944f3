package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/registry"
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

// TestOutboxTraceToWebhook: a traced request whose handler queues an
// outbox message stores its trace context with the message; the relay's
// delivery (idem.outbox.deliver) is a child of the request's
// idem.execute, sends traceparent with the signed webhook, and the
// receiving webhook.Receiver's idem.run is a child of that delivery: one
// trace from the client to the webhook's handler. On SQLite and
// PostgreSQL.
func TestOutboxTraceToWebhook(t *testing.T) {
	pgtest.EachDriver(t, "outboxtrace.db", func(t *testing.T, _, dsn string) {
		ctx := t.Context()
		st, err := idemstore.Open(ctx, dsn, idemstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		w3c := propagation.TraceContext{}

		// The receiver of the webhooks.
		rc, err := webhook.New(ctx, webhook.Config{
			Store:     st,
			Operation: idemhttp.Operation{Name: "own.events", APIRevision: "v1"},
			Verifier:  &webhook.Verifier{Secrets: [][]byte{oldSecret}},
			Sender:    idem.Identity{Principal: "self"},
			Options:   idemhttp.Options{TracerProvider: tp, Propagator: w3c},
		})
		if err != nil {
			t.Fatal(err)
		}
		received := make(chan trace.SpanContext, 1)
		recv := httptest.NewServer(rc.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			received <- trace.SpanContextFromContext(r.Context())
			w.Write([]byte(`{}`))
		})))
		t.Cleanup(recv.Close)

		// The service whose request queues the message.
		mw := &idemhttp.Middleware{Store: st, Operation: idemhttp.Operation{Name: "payments.create", APIRevision: "v1"},
			Identity:       func(*http.Request) (idem.Identity, error) { return idem.Identity{Tenant: "t", Principal: "p"}, nil },
			TracerProvider: tp, Propagator: w3c}
		svc := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idemhttp.AddOutbox(r.Context(), registry.Message{Topic: "payment.created", Payload: []byte(`{"amount":"1.00"}`)})
			w.WriteHeader(http.StatusCreated)
		})))
		t.Cleanup(svc.Close)

		cctx, client := tp.Tracer("client").Start(ctx, "client.create")
		req, _ := http.NewRequestWithContext(cctx, http.MethodPost, svc.URL, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-outbox-trace-4c1b")
		w3c.Inject(cctx, propagation.HeaderCarrier(req.Header))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		client.End()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("request: %d", resp.StatusCode)
		}

		relay := &outbox.Relay{Store: st, Publisher: &outbox.Webhook{URL: recv.URL, Secret: oldSecret, Propagator: w3c}, TracerProvider: tp}
		if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("relay: %d delivered, %v", n, err)
		}
		handler := <-received

		byName := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range sr.Ended() {
			byName[s.Name()] = append(byName[s.Name()], s)
			if s.SpanContext().TraceID() != client.SpanContext().TraceID() {
				t.Errorf("span %s in trace %s, want the client's %s", s.Name(), s.SpanContext().TraceID(), client.SpanContext().TraceID())
			}
		}
		if len(byName["idem.execute"]) != 2 || len(byName[outbox.SpanDeliver]) != 1 || len(byName["idem.run"]) != 2 {
			t.Fatalf("spans: %v", byName)
		}
		deliver := byName[outbox.SpanDeliver][0]
		var exec, run sdktrace.ReadOnlySpan // the request's execution, the receiver's run
		for _, s := range byName["idem.execute"] {
			if s.SpanContext().SpanID() == deliver.Parent().SpanID() {
				exec = s
			}
		}
		for _, s := range byName["idem.run"] {
			if s.Parent().SpanID() == deliver.SpanContext().SpanID() {
				run = s
			}
		}
		if exec == nil || run == nil {
			t.Fatalf("the delivery's parent %s is no idem.execute, or no idem.run is its child: %v", deliver.Parent().SpanID(), byName)
		}
		if handler.TraceID() != client.SpanContext().TraceID() {
			t.Errorf("the webhook's handler ran in trace %s, want %s", handler.TraceID(), client.SpanContext().TraceID())
		}
		for _, kv := range deliver.Attributes() {
			if kv.Key == "idem.topic" && kv.Value.Emit() != "payment.created" || kv.Key == "idem.outcome" && kv.Value.Emit() != "delivered" {
				t.Errorf("%s: %v", outbox.SpanDeliver, deliver.Attributes())
			}
		}
	})
}
