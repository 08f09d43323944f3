package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keygen"
	"github.com/idemkit/idem/registry"
)

// TestPreferWait: a duplicate of an operation in flight gets 409
// IN_PROGRESS with Retry-After and a monitor link; with Prefer: wait it
// waits and replays the outcome once it is committed — here by another
// process (the test, through the registry), so the server can only learn
// of it from the database.
func TestPreferWait(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		testWait(t, dsn, []*server{startServer(t, dsn)}, "k-wait")
	})
}

// reserveElsewhere reserves the scope of POST /v1/payments with key and
// body for the demo identity directly in the registry, as another
// instance accepting the request would, and returns the store and record.
func reserveElsewhere(t *testing.T, dsn, key, body string) (registry.Store, registry.Record) {
	t.Helper()
	ctx := context.Background()
	k, err := idem.ParseKey([]string{keygen.ForLabel(key)}, idem.StrictKeyPolicy) // the key postHeader sends
	if err != nil {
		t.Fatal(err)
	}
	id := idem.Identity{Tenant: "demo", Principal: "demo"}
	binding := idem.Binding{Canon: canon.Options{Mode: canon.ModeSchema, Schema: payments.Schema()}}
	fp, _, err := binding.Fingerprint(http.MethodPost, &url.URL{Path: "/v1/payments"},
		http.Header{"Content-Type": {"application/json"}}, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	store, err := idemstore.Open(ctx, dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	rec, created, err := store.Reserve(ctx, registry.Claim{
		Scope:       idem.ScopeOf(id, payments.OperationCreate, payments.APIRevision, k),
		Fingerprint: fp,
		Operation:   payments.OperationCreate,
		Owner:       registry.OwnerOf(id),
		Lease:       time.Minute,
		Retention:   time.Hour,
	})
	if err != nil || !created {
		t.Fatalf("Reserve: created %v, %v", created, err)
	}
	return store, rec
}

// testWait reserves key in the registry from the test process, checks
// that every server answers a duplicate with 409 IN_PROGRESS and a
// Prefer: wait that runs out the same way, then sends Prefer: wait=10 to
// every server at once, commits an outcome from the test process and
// checks that each waiting request replays it.
func testWait(t *testing.T, dsn string, servers []*server, key string) {
	body := `{"amount":"3.00","currency":"EUR","payee":"acct_w"}`
	store, rec := reserveElsewhere(t, dsn, key, body)
	op := rec.OperationID

	for i, s := range servers {
		wantInProgress(t, "duplicate of a reserved operation on server "+string(rune('A'+i)), s.post(t, "demo", key, body), op)
	}
	var v struct{ State string }
	if r := servers[0].get(t, "demo", "/v1/operations/"+op); r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil || v.State != "RESERVED" {
		t.Errorf("GET /v1/operations/%s: %v; want 200 with state RESERVED", op, r)
	}
	start := time.Now()
	wantInProgress(t, "Prefer: wait=1 on an operation that stays in flight", servers[0].post(t, "demo", key, body, "Prefer", "wait=1"), op)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("Prefer: wait=1 answered after %v; want it to wait about a second", d)
	}

	type result struct {
		r   reply
		err error
	}
	results := make([]chan result, len(servers))
	for i, s := range servers {
		base := s.reservations(t)
		results[i] = make(chan result, 1)
		go func() {
			r, err := s.send(http.MethodPost, "/v1/payments", "demo", postHeader(key, "Prefer", "wait=10"), body)
			results[i] <- result{r, err}
		}()
		// Once the server has made this request's reservation, it has seen
		// the operation in flight (nothing has completed it yet) and waits.
		awaitMetric(t, s, base)
	}

	// Nothing is committed yet: a waiting request must not answer.
	for i, ch := range results {
		select {
		case res := <-ch:
			t.Fatalf("Prefer: wait=10 on server %c answered before any outcome existed: %v %v (%v)", 'A'+i, res.r, res.r.header, res.err)
		case <-time.After(500 * time.Millisecond):
		}
	}

	stored := idem.Response{
		Status:    http.StatusCreated,
		MediaType: "application/json",
		Location:  "/v1/payments/pay_elsewhere",
		Body:      []byte(`{"id":"pay_elsewhere","note":"committed by another process"}`),
	}
	if _, err := store.Complete(context.Background(), rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return registry.Outcome{State: idem.StateSucceeded, Response: stored}, nil
	}); err != nil {
		t.Fatalf("Complete from the test process: %v", err)
	}
	want := reply{status: stored.Status, body: stored.Body, header: http.Header{
		"Content-Type": {stored.MediaType}, "Location": {stored.Location}, "Idempotency-Operation": {op},
	}}
	for i, ch := range results {
		name := "Prefer: wait=10 on server " + string(rune('A'+i))
		select {
		case res := <-ch:
			if res.err != nil {
				t.Errorf("%s: %v", name, res.err)
				continue
			}
			wantReplay(t, name, want, res.r)
		case <-time.After(time.Minute):
			t.Fatalf("%s: no answer within a minute", name)
		}
	}
	for i, s := range servers {
		wantReplay(t, "plain retry on server "+string(rune('A'+i)), want, s.post(t, "demo", key, body))
	}
	if c := countRows(t, dsn, op); c.Payments != 0 || c.Outbox != 0 {
		t.Errorf("rows of the operation completed by the test: %+v; want none (no server may execute it)", c)
	}
}

// awaitMetric polls the server's reservation count until it exceeds base.
func awaitMetric(t *testing.T, s *server, base int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.reservations(t) <= base {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("server %s made no reservation for the waiting request within 30s", s.url)
		}
	}
}
