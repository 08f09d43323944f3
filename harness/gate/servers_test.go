package gate

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is a database and n payments services on it, served over real
// HTTP in process, each with its own metrics registry.
type bundle struct {
	kind    string
	store   registry.Store
	targets []*Target
	servers []*httptest.Server
	metrics []*httptest.Server // each server's /metrics, its admin listener
	op      string             // the operation scrape reads; "" means payments.create
}

// dsnFor returns a fresh database of kind "sqlite" or "postgres".
func dsnFor(t *testing.T, kind string) string {
	if kind == "postgres" {
		return pgtest.DSN(t)
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "gate.db")
}

// newBundle starts the bundle; each option adjusts the services' Config.
func newBundle(t *testing.T, kind string, n int, tokens payments.Tokens, options ...func(*payments.Config)) *bundle {
	t.Helper()
	return newBundleWith(t, kind, n, tokens, idemstore.Options{}, options...)
}

// newBundleWith is newBundle with the store's options (a key ring).
func newBundleWith(t *testing.T, kind string, n int, tokens payments.Tokens, opts idemstore.Options, options ...func(*payments.Config)) *bundle {
	t.Helper()
	ctx := context.Background()
	store, err := idemstore.Open(ctx, dsnFor(t, kind), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	b := &bundle{kind: kind, store: store}
	for range n {
		cfg := payments.Config{Store: store, Auth: tokens,
			Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()}
		for _, o := range options {
			o(&cfg)
		}
		svc, err := payments.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(svc.Handler())
		t.Cleanup(srv.Close)
		b.servers = append(b.servers, srv)
		m := httptest.NewServer(promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
		t.Cleanup(m.Close)
		b.metrics = append(b.metrics, m)
		b.targets = append(b.targets, NewTarget(srv.URL))
	}
	return b
}

// scrape merges the reservation histograms of the bundle's servers.
func (b *bundle) scrape(t *testing.T) Histogram {
	t.Helper()
	var total Histogram
	for i, srv := range b.servers {
		in := &instance{name: srv.URL, url: srv.URL, metricsURL: b.metrics[i].URL, op: b.op}
		h, err := in.scrape(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := total.Add(h); err != nil {
			t.Fatal(err)
		}
	}
	return total
}
