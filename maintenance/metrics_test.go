package maintenance_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/maintenance"
	"github.com/idemkit/idem/registry"
)

// pruneGauges gathers reg's three prune gauges by name.
func pruneGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		out[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return out
}

// TestPruneCollector: the prune gauges follow the recorded passes — none
// (0: never pruned, which IdemPruneNotRunning fires on), a success, then
// a failure (the success's time stays, last_run_failed is 1: what
// IdemPruneFailing fires on) — and a registry that does not answer fails
// the scrape of them instead of reporting a success of time 0.
// threat:alert-blind-spot
func TestPruneCollector(t *testing.T) {
	store, err := idemsqlite.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "p.db"), idemsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(maintenance.NewPruneCollector(store))
	want := func(success, last, failed float64) {
		t.Helper()
		got := pruneGauges(t, reg)
		if got["idem_prune_last_success_timestamp_seconds"] != success || got["idem_prune_last_run_timestamp_seconds"] != last ||
			got["idem_prune_last_run_failed"] != failed || len(got) != 3 {
			t.Errorf("prune gauges %v; want success %v, last %v, failed %v", got, success, last, failed)
		}
	}
	want(0, 0, 0)

	ok := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := store.RecordPruneRun(t.Context(), registry.PruneRun{Actor: "test", StartedAt: ok.Add(-time.Second), FinishedAt: ok}); err != nil {
		t.Fatal(err)
	}
	want(float64(ok.Unix()), float64(ok.Unix()), 0)

	bad := ok.Add(30 * time.Minute)
	if err := store.RecordPruneRun(t.Context(), registry.PruneRun{Actor: "test", StartedAt: bad.Add(-time.Second), FinishedAt: bad, Error: "disk full"}); err != nil {
		t.Fatal(err)
	}
	want(float64(ok.Unix()), float64(bad.Unix()), 1)

	store.Close()
	if _, err := reg.Gather(); err == nil {
		t.Error("a failed registry query must fail the prune gauges, not report them")
	}
}
