package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestPlainCreateSQLite(t *testing.T) {
	t.Parallel()
	testPlainCreate(t, "sqlite:"+filepath.Join(t.TempDir(), "p.db"))
}

func TestPlainCreatePostgres(t *testing.T) {
	t.Parallel()
	testPlainCreate(t, pgtest.DSN(t))
}

// testPlainCreate serves the plain handler and the service side by side on
// one fresh database.
func testPlainCreate(t *testing.T, dsn string) {
	ctx := context.Background()
	store, err := idemstore.Open(ctx, dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	svc, err := New(ctx, Config{Store: store, Auth: testTokens, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", svc.PlainCreate())
	plainSrv, idemSrv := httptest.NewServer(mux), httptest.NewServer(svc.Handler())
	t.Cleanup(plainSrv.Close)
	t.Cleanup(idemSrv.Close)
	plain := &testBundle{store: store, srv: plainSrv}
	service := &testBundle{store: store, srv: idemSrv}

	const body = `{"amount": "12.5", "currency": "EUR", "payee": "acct_1", "memo": "rent <&>"}`
	r := plain.post(t, "tok-alice", "", body)
	if r.status != http.StatusCreated || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("plain create: %v, headers %v", r, r.header)
	}
	for _, h := range []string{"Idempotency-Contract", "Idempotency-Operation", "Idempotent-Replayed"} {
		if v := r.header.Get(h); v != "" {
			t.Errorf("plain response carries %s: %q", h, v)
		}
	}
	var p Payment
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.ID, "pay_") || len(p.ID) != len("pay_")+idem.OperationIDLen-len("op_") || r.header.Get("Location") != "/v1/payments/"+p.ID {
		t.Errorf("id %q, Location %q", p.ID, r.header.Get("Location"))
	}
	if p.Amount != "12.50" || p.Currency != "EUR" || p.Payee != "acct_1" || p.Memo == nil || *p.Memo != "rent <&>" ||
		!bytes.Contains(r.body, []byte(`"rent <&>"`)) || p.CreatedAt == "" {
		t.Errorf("payment %s", r.body)
	}

	// The rows: one payment, readable by the service, and one outbox
	// message holding the response body.
	if g := service.do(t, http.MethodGet, "/v1/payments/"+p.ID, "tok-alice", "", ""); g.status != http.StatusOK || !bytes.Equal(g.body, r.body) {
		t.Errorf("GET through the service: %v, want %s", g, r.body)
	}
	requestID := "op_" + strings.TrimPrefix(p.ID, "pay_")
	var rowOp, tenant, principal, msgID, msgOp, topic string
	var payload []byte
	err = store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT operation_id, tenant, principal FROM payments WHERE id = $1", p.ID).
			Scan(&rowOp, &tenant, &principal); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT message_id, operation_id, topic, payload FROM idem_outbox").
			Scan(&msgID, &msgOp, &topic, &payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	if rowOp != requestID || tenant != "acme" || principal != "alice" {
		t.Errorf("payment row: operation_id %q (want %q), owner %s/%s", rowOp, requestID, tenant, principal)
	}
	if msgID != registry.MessageID(requestID, 0) || msgOp != requestID || topic != TopicCreated || !bytes.Equal(payload, r.body) {
		t.Errorf("outbox row: %q %q %q %s", msgID, msgOp, topic, payload)
	}

	// The same body as the idempotent route's, apart from id and time.
	first, _ := service.mustCreate(t, "tok-alice", "k1", body)
	if a, b := withoutIdentity(t, r.body), withoutIdentity(t, first.body); a != b {
		t.Errorf("plain body %s, idempotent body %s", a, b)
	}

	// Not idempotent: the same request again is a second payment.
	if again := plain.post(t, "tok-alice", "", body); again.status != http.StatusCreated || bytes.Equal(again.body, r.body) {
		t.Errorf("second plain create: %v", again)
	}
	if n := countPayments(t, store); n != 3 {
		t.Errorf("%d payments, want 3 (two plain, one idempotent)", n)
	}

	// Refusals, with the idempotent route's codes, and nothing written.
	requireProblem(t, plain.post(t, "", "", body), http.StatusUnauthorized, idem.CodeUnauthenticated)
	requireProblem(t, plain.post(t, "tok-alice", "", `{"amount": "1", "currency": "eur", "payee": "p"}`),
		http.StatusBadRequest, idem.CodeSchemaViolation)
	requireProblem(t, plain.post(t, "tok-alice", "", `{"amount": "1", "amount": "2", "currency": "EUR", "payee": "p"}`),
		http.StatusBadRequest, idem.CodeInvalidJSON)
	requireProblem(t, plain.post(t, "tok-alice", "", `{"amount": "1000000.01", "currency": "EUR", "payee": "p"}`),
		http.StatusUnprocessableEntity, CodeAmountLimit)
	requireProblem(t, plain.post(t, "tok-alice", "", `{"amount": "1", "currency": "EUR", "payee": "`+strings.Repeat("x", 1<<20)+`"}`),
		http.StatusRequestEntityTooLarge, idem.CodeBodyTooLarge)
	req, _ := http.NewRequest(http.MethodPost, plainSrv.URL+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok-alice")
	req.Header.Set("Content-Type", "text/plain")
	resp, err := plainSrv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: status %d, want 415", resp.StatusCode)
	}
	if n := countPayments(t, store); n != 3 {
		t.Errorf("%d payments after refusals, want 3", n)
	}
}

// withoutIdentity returns a payment body without its id and created_at.
func withoutIdentity(t *testing.T, body []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m["id"] == nil || m["created_at"] == nil {
		t.Fatalf("body without id or created_at: %s", body)
	}
	delete(m, "id")
	delete(m, "created_at")
	b, _ := json.Marshal(m)
	return string(b)
}

// TestPlainCreateWith: the step runs in the plain transaction with the
// caller's identity and the request; when it fails, the answer is 503
// and the payment is rolled back with it.
func TestPlainCreateWith(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := idemstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "w.db"), idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	svc, err := New(ctx, Config{Store: store, Auth: testTokens, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", svc.PlainCreateWith(func(ctx context.Context, tx registry.Tx, id idem.Identity, r *http.Request) error {
		key := r.Header.Get(idem.KeyHeader)
		seen = append(seen, id.Tenant+"/"+id.Principal+" "+key) // one request at a time below
		if key == testKey("fail") {
			return errors.New("step failed")
		}
		var n int
		return tx.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&n) // inside the transaction
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b := &testBundle{store: store, srv: srv}
	const body = `{"amount": "1", "currency": "EUR", "payee": "acct_1"}`
	if r := b.post(t, "tok-bob", "k1", body); r.status != http.StatusCreated {
		t.Fatalf("create with a step: %v", r)
	}
	requireProblem(t, b.post(t, "tok-alice", "fail", body), http.StatusServiceUnavailable, idem.CodeStoreUnavailable)
	if want := []string{"acme/bob " + testKey("k1"), "acme/alice " + testKey("fail")}; !slices.Equal(seen, want) {
		t.Errorf("step saw %q, want %q", seen, want)
	}
	if n := countPayments(t, store); n != 1 {
		t.Errorf("%d payments, want 1 (the failed step's rolled back)", n)
	}
}
