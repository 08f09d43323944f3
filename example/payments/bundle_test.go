package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keygen"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// testBundle is a service on a fresh database behind a test server.
type testBundle struct {
	store registry.Store
	srv   *httptest.Server
	reg   *prometheus.Registry // the service's metrics (Config.Registry)
}

// Test identities: bob shares alice's tenant; eve has alice's principal
// name in another tenant.
var testTokens = Tokens{
	"tok-alice": {Tenant: "acme", Principal: "alice"},
	"tok-bob":   {Tenant: "acme", Principal: "bob"},
	"tok-eve":   {Tenant: "other", Principal: "alice"},
	"tok-tr":    {Tenant: "t", Principal: "p"}, // the transfer tests' caller
	// alice's names padded or in another case: other callers (testExactMatch).
	"tok-alice-pad":  {Tenant: "acme", Principal: "alice "},
	"tok-alice-case": {Tenant: "ACME", Principal: "Alice"},
}

// setup opens the store dsn names, creates the service on it and serves
// it from a test server.
func setup(t *testing.T, dsn string) *testBundle {
	t.Helper()
	return setupConfig(t, dsn, Config{})
}

// setupConfig is setup with a configuration; its Store, Auth and Logger
// are set here.
func setupConfig(t *testing.T, dsn string, cfg Config) *testBundle {
	t.Helper()
	ctx := context.Background()
	store, err := idemstore.Open(ctx, dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	cfg.Store, cfg.Auth, cfg.Logger = store, testTokens, slog.New(slog.DiscardHandler)
	if cfg.Database == "" {
		cfg.Database = idemstore.Kind(dsn)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	svc, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close) // runs before store.Close
	return &testBundle{store: store, srv: srv, reg: cfg.Registry}
}

// serviceTests run against the service on every driver, each on a fresh
// database.
var serviceTests = []struct {
	name string
	fn   func(*testing.T, *testBundle)
}{
	{"Create", testCreate},
	{"MemoAbsent", testMemoAbsent},
	{"Replay", testReplay},
	{"Conflict", testConflict},
	{"RefusedPayloads", testRefusedPayloads},
	{"AmountLimit", testAmountLimit},
	{"Unauthenticated", testUnauthenticated},
	{"Ownership", testOwnership},
	{"List", testList},
	{"HealthAndMetrics", testHealthAndMetrics},
	{"Doors", testDoors},
	{"ConcurrentCreate", testConcurrentCreate},
	{"Refund", testRefund},
	{"RefundReplay", testRefundReplay},
	{"RefundCap", testRefundCap},
	{"RefundOwnership", testRefundOwnership},
	{"ConcurrentRefunds", testConcurrentRefunds},
	{"LargestPayment", testLargestPayment},
	{"LargestRefund", testLargestRefund},
	{"StrictKeys", testStrictKeys},
	{"ExactMatch", testExactMatch},
}

func runServiceTests(t *testing.T, dsn func(*testing.T) string) {
	for _, tc := range serviceTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, setup(t, dsn(t)))
		})
	}
}

// testDrivers gives, by driver name, a fresh database for a test: the
// tests that run on every driver range over it.
var testDrivers = map[string]func(*testing.T) string{
	"SQLite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "x.db") },
	"Postgres": func(t *testing.T) string { return pgtest.DSN(t) },
	"MySQL":    func(t *testing.T) string { return mytest.URL(t) },
}

// Proves threat:weak-keys (docs/threat-model.md).
// Proves threat:unstorable-answer (docs/threat-model.md).
func TestServiceSQLite(t *testing.T) {
	t.Parallel()
	runServiceTests(t, testDrivers["SQLite"])
}

// Proves threat:weak-keys (docs/threat-model.md).
// Proves threat:unstorable-answer (docs/threat-model.md).
func TestServicePostgres(t *testing.T) {
	t.Parallel()
	runServiceTests(t, testDrivers["Postgres"])
}

// TestServiceMySQL runs the service tests on MariaDB (idemmysql), with
// the MySQL statements of payments.sql and plain.sql; testExactMatch
// shows its binary keys compare byte for byte.
// threat:mysql-collation-match
// Proves threat:weak-keys (docs/threat-model.md).
// Proves threat:unstorable-answer (docs/threat-model.md).
func TestServiceMySQL(t *testing.T) {
	t.Parallel()
	runServiceTests(t, testDrivers["MySQL"])
}

// TestNewConcurrent starts several services on one fresh PostgreSQL
// database at once, as several instances of "idem serve" do, and then
// on one MariaDB database: the table creation must not fail any of them.
func TestNewConcurrent(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Postgres", "MySQL"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := testDrivers[name](t)
			ctx := context.Background()
			errs := make(chan error, 8)
			for range cap(errs) {
				go func() {
					store, err := idemstore.Open(ctx, dsn, idemstore.Options{})
					if err != nil {
						errs <- err
						return
					}
					defer store.Close()
					_, err = New(ctx, Config{Store: store, Database: idemstore.Kind(dsn), Auth: testTokens, Logger: slog.New(slog.DiscardHandler)})
					errs <- err
				}()
			}
			for range cap(errs) {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestNewDatabase: Config.Database names the engine; an unknown name is
// an error of New, and a store on MariaDB not named "mysql" fails New
// (its tables would be created with another engine's statements) instead
// of serving.
func TestNewDatabase(t *testing.T) {
	t.Parallel()
	store, err := idemstore.Open(t.Context(), testDrivers["MySQL"](t), idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	for _, db := range []string{"mariadb", ""} {
		if _, err := New(t.Context(), Config{Store: store, Database: db, Auth: testTokens, Logger: slog.New(slog.DiscardHandler)}); err == nil {
			t.Errorf("New with Database %q on MariaDB: no error", db)
		}
	}
	if _, err := New(t.Context(), Config{Store: store, Database: "mysql", Auth: testTokens, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Errorf("New with Database mysql: %v", err)
	}
}

// TestMain starts PostgreSQL and MariaDB on demand and stops them after
// the tests.
func TestMain(m *testing.M) { pgtest.Main(mytest.Runner{M: m}) }

// testKey is the key a test means by label (keygen.ForLabel): "k1" is
// sent as a key the service's strict key policy accepts, the same for the
// same label; "raw:VALUE" is sent as VALUE.
func testKey(label string) string { return keygen.ForLabel(label) }

// response is what a test request got.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return http.StatusText(r.status) + " " + string(r.body) }

// code returns the problem code of the response ("" if it is not a
// problem).
func (r response) code() idem.Code {
	if r.header.Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p struct{ Code idem.Code }
	json.Unmarshal(r.body, &p)
	return p.Code
}

// do sends a request; token and key are left out when empty.
func (b *testBundle) do(t *testing.T, method, path, token, key, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", testKey(key))
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, rb}
}

func (b *testBundle) post(t *testing.T, token, key, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/payments", token, key, body)
}

// mustCreate posts body and requires a first execution's 201.
func (b *testBundle) mustCreate(t *testing.T, token, key, body string) (response, Payment) {
	t.Helper()
	r := b.post(t, token, key, body)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("create: %v, replayed %q", r, r.header.Get("Idempotent-Replayed"))
	}
	var p Payment
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	return r, p
}

// requireReplay checks that got replays first.
func requireReplay(t *testing.T, first, got response) {
	t.Helper()
	if got.status != first.status || !bytes.Equal(got.body, first.body) {
		t.Fatalf("replay: %v, want %v", got, first)
	}
	for _, h := range []string{"Idempotency-Operation", "Location", "Content-Type", "Idempotency-Contract"} {
		if got.header.Get(h) != first.header.Get(h) {
			t.Errorf("replay %s = %q, first %q", h, got.header.Get(h), first.header.Get(h))
		}
	}
	if got.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay without Idempotent-Replayed: true (headers %v)", got.header)
	}
}

func requireProblem(t *testing.T, r response, status int, code idem.Code) {
	t.Helper()
	if r.status != status || r.code() != code {
		t.Fatalf("got %v (Content-Type %q), want %d %s", r, r.header.Get("Content-Type"), status, code)
	}
}

func countPayments(t *testing.T, store registry.Store) int {
	t.Helper()
	var n int
	err := store.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
