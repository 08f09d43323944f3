package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/deployfiles"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/pgtest"
)

// deployNames returns the metric names the rules and the dashboard under
// deploy/ read (recording rules' own names, which Prometheus makes, left
// out) and fails t on a name with a colon that no recording rule defines.
func deployNames(t *testing.T) []string {
	t.Helper()
	rulesText, err := os.ReadFile("../../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := deployfiles.RuleFile(string(rulesText))
	if err != nil {
		t.Fatalf("rules.yml: %v", err)
	}
	dashboard, err := os.ReadFile("../../deploy/grafana/idem.json")
	if err != nil {
		t.Fatal(err)
	}
	queries, err := deployfiles.DashboardQueries(dashboard)
	if err != nil {
		t.Fatalf("idem.json: %v", err)
	}
	if len(rules.Exprs) < 10 || len(queries) < 10 {
		t.Fatalf("read %d rule expressions and %d dashboard queries: the readers found too few", len(rules.Exprs), len(queries))
	}
	var names []string
	for _, q := range slices.Concat(rules.Exprs, queries) {
		for _, n := range deployfiles.Names(q) {
			switch {
			case slices.Contains(rules.Records, n):
			case strings.Contains(n, ":"):
				t.Errorf("%q reads %s, which no recording rule of rules.yml defines", q, n)
			case !slices.Contains(names, n):
				names = append(names, n)
			}
		}
	}
	return names
}

// shardedOnly are the metrics only "idem serve --shard" exports: the
// shard map's draining tenants.
var shardedOnly = []string{"idem_tenants_draining", "idem_tenant_draining_oldest_seconds"}

// TestDeployMetricsExported: every metric the alerting and recording rules
// (deploy/prometheus/rules.yml) and the Grafana dashboard
// (deploy/grafana/idem.json) read is exported by a running "idem serve",
// scraped from its admin listener — on one registry (all but
// shardedOnly) and with --shard (all). Some metrics appear only after an
// event, so the test drives each one rather than accept a name unseen:
// a payment and its replay (idem_requests_total, the
// idem_reservation_seconds histogram, idem_in_flight — vectors with no
// series until a request), an UNKNOWN operation made in the registry
// before the start (idem_unknown_by_operation, which has series only for
// operation names that have some), and --webhook to a receiver (the
// outbox metrics are registered only with a relay).
// threat:alert-blind-spot
func TestDeployMetricsExported(t *testing.T) {
	t.Parallel()
	names := deployNames(t)
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "sharded"}[sharded], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			dsn := "sqlite:" + filepath.Join(dir, "deploy.db")
			openOpsStore(t, dsn).operation(idem.StateUnknown)
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			defer receiver.Close()
			secret, _ := secretFile(t)
			args := []string{"--db", dsn}
			want := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(shardedOnly, n) })
			if sharded {
				mapFile := filepath.Join(dir, "map.json")
				if err := os.WriteFile(mapFile, []byte(`{"default":"a","tenants":{}}`), 0o600); err != nil {
					t.Fatal(err)
				}
				args = []string{"--shard", "a=" + dsn, "--shard", "b=sqlite:" + filepath.Join(dir, "b.db"), "--shard-default", "a", "--shard-map", mapFile}
				want = names
			}
			s := startServe(t, append(args, "--admin-addr", "127.0.0.1:0", "--webhook", receiver.URL, "--webhook-secret-file", secret)...)
			exportsAll(t, s, want)
		})
	}
}

// exportsAll sends a payment and its replay to s and polls its admin
// listener's /metrics until every name of want has a sample.
func exportsAll(t *testing.T, s *server, want []string) {
	t.Helper()
	admin := adminAddr(t, s)
	for range 2 { // executed, then replayed
		if resp, b := s.post(t, "demo", "deploy-1", `{"amount":"1","currency":"EUR","payee":"p"}`); resp.StatusCode != http.StatusCreated {
			t.Fatalf("payment: %d %s", resp.StatusCode, b)
		}
	}
	sample := regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)
	var missing []string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("missing from /metrics: %q", missing)
		}
	})
	pollUntil(t, "every metric deploy/ reads on /metrics", 30*time.Second, func(int) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
		return do(t, req)
	}, func(resp *http.Response, body []byte) bool {
		exported := map[string]bool{}
		for _, m := range sample.FindAllSubmatch(body, -1) {
			exported[string(m[1])] = true
		}
		missing = missing[:0]
		for _, n := range want {
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		return resp.StatusCode == http.StatusOK && len(missing) == 0
	})
	t.Logf("all %d metric names deploy/ reads are exported: %s", len(want), strings.Join(want, " "))
}

// proxiedDSN returns the test database's DSN through a pgproxy, which
// cuts the database away when closed (closed at the test's end too).
func proxiedDSN(t *testing.T) (string, *pgproxy.Proxy) {
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := pgproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	return u.String(), proxy
}

// scrapeMetrics is a pollUntil try that GETs /metrics at addr.
func scrapeMetrics(t *testing.T, addr string) func(int) (*http.Response, []byte) {
	return func(int) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		return do(t, req)
	}
}

var storeUpLine = regexp.MustCompile(`(?m)^idem_store_up (\d+)$`)

// storeUp is a pollUntil want: a 200 scrape with idem_store_up want.
func storeUp(want string) func(*http.Response, []byte) bool {
	return func(resp *http.Response, body []byte) bool {
		m := storeUpLine.FindSubmatch(body)
		return resp.StatusCode == http.StatusOK && m != nil && string(m[1]) == want
	}
}

// TestServeMetricsStoreDown: with its database cut away, "idem serve"
// still answers /metrics 200, with idem_store_up 0 (what
// IdemStoreUnavailable fires on) and without the gauges it reads from the
// database (left out, not reported as 0) — a scrape that failed as a
// whole would hide the outage behind a missing target instead — and a
// payment refused meanwhile is counted as outcome="store_unavailable",
// the label IdemStoreErrorsHigh matches.
// threat:alert-blind-spot
func TestServeMetricsStoreDown(t *testing.T) {
	t.Parallel()
	dsn, proxy := proxiedDSN(t)
	s := startServe(t, "--db", dsn, "--admin-addr", "127.0.0.1:0")
	scrape := scrapeMetrics(t, adminAddr(t, s))
	_, body := pollUntil(t, "idem_store_up 1", 30*time.Second, scrape, storeUp("1"))
	if !strings.Contains(string(body), "\nidem_unknown_operations 0\n") {
		t.Fatalf("with the database up, /metrics lacks idem_unknown_operations 0:\n%s", body)
	}
	proxy.Close()
	// A payment now fails closed, counted under the outcome label
	// IdemStoreErrorsHigh matches.
	if resp, b := s.post(t, "demo", "store-down-1", `{"amount":"1","currency":"EUR","payee":"p"}`); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("payment with the database down: %d %s; want 503", resp.StatusCode, b)
	}
	_, body = pollUntil(t, "idem_store_up 0 on a 200 scrape", 30*time.Second, scrape, storeUp("0"))
	if !regexp.MustCompile(`(?m)^idem_requests_total\{operation="[^"]+",outcome="store_unavailable"\} 1$`).Match(body) {
		t.Errorf("the refused payment is not counted as outcome=\"store_unavailable\":\n%s", body)
	}
	for _, name := range []string{"idem_unknown_operations", "idem_draining", "idem_prune_last_run_failed"} {
		if regexp.MustCompile(`(?m)^` + name + `[ {]`).Match(body) {
			t.Errorf("with the database down, /metrics still reports %s:\n%s", name, body)
		}
	}
}
