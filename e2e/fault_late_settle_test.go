package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// outage stands between "idem serve" and the provider: a real HTTP
// reverse proxy that, while down, answers every request 503 without
// passing it on (the provider unreachable for a while) and counts them.
type outage struct {
	*httptest.Server
	down    atomic.Bool
	refused atomic.Int64
}

func newOutage(t *testing.T, provider string) *outage {
	t.Helper()
	target, err := url.Parse(provider)
	if err != nil {
		t.Fatal(err)
	}
	o := &outage{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.down.Load() {
			o.refused.Add(1)
			http.Error(w, "provider unreachable", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

// TestFaultLateSettlement (SPEC E5: retention counts from settlement):
// with --retention 3s, every window at 0 and a prune every 100 ms, a
// transfer is UNKNOWN for 10 s — its provider call timed out after the
// transfer executed, then the provider is unreachable (every lookup and
// re-send answered 503, which is no evidence) — and is never retired
// meanwhile. Once the provider is back, a retry settles it on the
// provider's lookup; after a prune pass that began after the settlement,
// the next retry still replays its 201 (the record expires 3 s after the
// settlement, not 3 s after its acceptance, long past); 3 s later the
// record retires (409 KEY_RETIRED), so the prune did run. The provider
// executed once. threat:late-settlement-lost
func TestFaultLateSettlement(t *testing.T) {
	eachDB(t, func(t *testing.T, dsn string) {
		const retention, outageFor = 3 * time.Second, 10 * time.Second
		f := newFault(t, dsn)
		prov := f.provider()
		proxy := newOutage(t, prov.url)
		s := f.serve("A", nil, true, "--provider", proxy.URL, "--provider-timeout", "300ms", "--recover-interval", "200ms",
			"--retention", retention.String(), "--prune-interval", "100ms",
			"--client-retry-window", "0s", "--queue-backlog-window", "0s", "--reconciliation-window", "0s", "--restore-window", "0s")
		db, err := openDB(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		control := func(mode string) {
			t.Helper()
			r, err := f.do(prov, http.MethodPost, "/control", "", nil, `{"mode":"`+mode+`"}`)
			if err != nil || r.status != http.StatusOK {
				t.Fatalf("provider mode %s: %v %v", mode, r, err)
			}
		}
		state := func(op string) string {
			t.Helper()
			g, err := f.do(s, http.MethodGet, "/v1/operations/"+op, "demo", nil, "")
			var v struct{ State string }
			if err != nil || g.status != http.StatusOK || json.Unmarshal(g.body, &v) != nil {
				t.Fatalf("monitor of %s: %v %v", op, g, err)
			}
			return v.State
		}

		key, body := f.key("late"), `{"amount":"`+f.amount()+`","currency":"EUR","payee":"acct_1"}`
		control("hang")
		first := f.mustPost(s, "/v1/transfers", "demo", key, body)
		op := first.header.Get("Idempotency-Operation")
		if msg := problemErr(first, http.StatusConflict, "OUTCOME_UNKNOWN"); msg != "" || op == "" {
			t.Fatalf("transfer whose provider call timed out: %s %v; want 409 OUTCOME_UNKNOWN naming the operation", msg, first.header)
		}
		unknownAt := time.Now()
		var executed string
		await(t, "the provider executes the timed-out transfer", func() bool {
			r, err := prov.send(http.MethodGet, "/stats", "", nil, "")
			var st struct{ Executed int }
			executed = r.String()
			return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &st) == nil && st.Executed >= 1
		}, &executed)
		proxy.down.Store(true)
		control("ok")

		// The outage: the transfer stays UNKNOWN, pass after prune pass,
		// for more than three retentions.
		passes := prunePasses(t, db)
		await(t, "10 s of outage with the transfer UNKNOWN", func() bool {
			if st := state(op); st != string(idem.StateUnknown) {
				t.Fatalf("during the outage the transfer is %s, want UNKNOWN", st)
			}
			return time.Since(unknownAt) >= outageFor
		})
		if n := prunePasses(t, db); n < passes+10 {
			t.Fatalf("%d prune passes during the outage; want many", n-passes)
		}
		if proxy.refused.Load() == 0 {
			t.Fatalf("nobody asked the provider during the outage")
		}
		t.Logf("UNKNOWN for %v; %d provider requests refused by the outage", time.Since(unknownAt).Round(time.Millisecond), proxy.refused.Load())

		// The provider is back: a retry settles the transfer on its lookup.
		proxy.down.Store(false)
		var settled reply
		var seen string
		var sent time.Time // when the retry that settled was sent: the settlement is later
		await(t, "a retry settles the transfer", func() bool {
			sent = time.Now()
			r, err := f.post(s, "/v1/transfers", "demo", key, body)
			seen = r.String()
			if err == nil && r.status != http.StatusCreated && problemErr(r, http.StatusConflict, "OUTCOME_UNKNOWN") != "" &&
				problemErr(r, http.StatusServiceUnavailable, string(idem.CodeStoreUnavailable)) != "" {
				t.Fatalf("retry once the provider is back: %v; want 201 or, until settled, 409 OUTCOME_UNKNOWN", r)
			}
			settled = r
			return err == nil && r.status == http.StatusCreated
		}, &seen)
		settledAt := time.Now()
		if settled.header.Get("Idempotency-Operation") != op {
			t.Fatalf("settling retry: %v %v; want the transfer's 201 for %s", settled, settled.header, op)
		}
		// A whole prune pass after the settlement, then the replay.
		after := prunePasses(t, db)
		await(t, "a prune pass that began after the settlement", func() bool { return prunePasses(t, db) >= after+2 })
		replay := f.mustPost(s, "/v1/transfers", "demo", key, body)
		if since := time.Since(settledAt); since >= retention {
			t.Fatalf("the replay came %v after the settlement, not within the retention %v: the machine is too slow to tell", since, retention)
		}
		if replay.status != http.StatusCreated || replay.header.Get("Location") != settled.header.Get("Location") ||
			replay.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(replay.body), `"payee":"acct_1"`) {
			t.Fatalf("retry right after the late settlement: %v %v; want the transfer's 201 replayed", replay, replay.header)
		}
		// Retention after the settlement: the record retires.
		var retired reply
		await(t, "the record retires", func() bool {
			r, err := f.post(s, "/v1/transfers", "demo", key, body)
			seen = r.String()
			if err == nil && r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the settled transfer executed again: %v", r)
			}
			retired = r
			return err == nil && problemErr(r, http.StatusConflict, string(idem.CodeKeyRetired)) == ""
		}, &seen)
		if since := time.Since(sent); since < retention {
			t.Errorf("retired %v after the settling retry was sent, before the retention %v", since, retention)
		}
		if retired.header.Get("Idempotency-Operation") != op {
			t.Errorf("KEY_RETIRED names %q, want %s", retired.header.Get("Idempotency-Operation"), op)
		}
		f.check(allow{Retired: true})
		if f.last.ProviderExecuted != 1 {
			t.Errorf("provider executed %d transfers; want exactly 1", f.last.ProviderExecuted)
		}
	})
}

// prunePasses counts the prune passes the registry recorded so far (the
// highest sequence number: older ones are trimmed).
func prunePasses(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM idem_prune_runs`).Scan(&n); err != nil {
		t.Fatalf("reading the prune runs: %v", err)
	}
	return n
}
