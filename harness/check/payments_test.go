package check

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// paymentsTemplate is a payments.v1 body; the changed payload differs in
// amount (11.00 against 12.00).
const paymentsTemplate = `{"amount":"1{{variant}}.00","currency":"EUR","payee":"acct_{{unique}}"}`

// servePayments runs the reference payments service on dsn as "idem
// serve" builds it, with an --auth file of two tokens (alice and bob of
// tenant acme), and returns its base URL.
func servePayments(t *testing.T, dsn string) string {
	t.Helper()
	auth := filepath.Join(t.TempDir(), "auth.json")
	err := os.WriteFile(auth, []byte(`{"tok-alice-Zr4kW9pQ2mX7vT1nB8y": {"tenant": "acme", "principal": "alice"},
		"tok-bob-Hd3sF6gJ0aK9wE2rU7iO": {"tenant": "acme", "principal": "bob"}}`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := payments.LoadTokens(auth)
	if err != nil {
		t.Fatal(err)
	}
	store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc, err := payments.New(t.Context(), payments.Config{
		Store:    store,
		Auth:     tokens,
		Logger:   slog.New(slog.DiscardHandler),
		Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close) // runs before store.Close
	return srv.URL
}

// checkPayments runs the whole check against the payments service at
// base and requires every scenario to pass.
func checkPayments(t *testing.T, base string, tweak func(*Config)) *Report {
	t.Helper()
	cfg := Config{
		URL:       base + "/v1/payments",
		Body:      paymentsTemplate,
		Header:    bearer("tok-alice-Zr4kW9pQ2mX7vT1nB8y"),
		AltHeader: bearer("tok-bob-Hd3sF6gJ0aK9wE2rU7iO"),
		CountURL:  "/v1/payments",
		LoadKeys:  100,
		Timeout:   2 * time.Minute, // the test machine may be busy
	}
	if tweak != nil {
		tweak(&cfg)
	}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	rep.WriteTable(&table)
	t.Logf("report:\n%s", table.String())
	if !rep.Passed || rep.Counts.Passed != baseScenarios() {
		t.Fatalf("the reference service did not pass every scenario: %+v", rep.Counts)
	}
	// Its strict key policy refuses the low-entropy keys: no warning.
	if r, _ := rep.Result("key-entropy"); r.Status != Passed || rep.Counts.Warnings != 0 ||
		r.Statuses["400 KEY_INVALID"] != 2 {
		t.Fatalf("key-entropy against the reference service: %+v", r)
	}
	return rep
}

func TestPaymentsSQLite(t *testing.T) {
	t.Parallel()
	base := servePayments(t, "sqlite:"+filepath.Join(t.TempDir(), "check.db"))
	// SQLite has one writer and is slow under -race on a busy machine:
	// fewer requests in flight.
	rep := checkPayments(t, base, func(c *Config) { c.Concurrency, c.LoadKeys = 16, 30 })
	if l, _ := rep.Result("load"); l.Load == nil || l.Load.Requests != 60 || l.Load.ThroughputRPS <= 0 {
		t.Errorf("load figures %+v", l.Load)
	}
}

func TestPaymentsPostgres(t *testing.T) {
	t.Parallel()
	base := servePayments(t, pgtest.DSN(t))
	checkPayments(t, base, func(c *Config) { c.IDField = "id" })
}
