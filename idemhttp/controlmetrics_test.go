package idemhttp_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// gaugeValues gathers reg and returns each unlabelled gauge's value by
// name; a metric the scrape left out is absent from the map.
func gaugeValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			out[f.GetName()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestControlCollector: the control row's gauges follow idem drain and
// idem epoch bump, the durations count from the row's last change (the
// store's clock is set an hour back, so the drain is an hour old), and a
// registry that does not answer reports idem_store_up 0 and leaves the
// others out instead of reporting them as zero — which the alerts
// IdemStoreUnavailable, IdemDrainingTooLong and IdemWriterFencedTooLong
// read.
// threat:alert-blind-spot
func TestControlCollector(t *testing.T) {
	pgtest.EachDriver(t, "control.db", func(t *testing.T, _, dsn string) {
		changed := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
		store, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: func() time.Time { return changed }})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		ctl, err := store.Control(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(idemhttp.NewControlCollector(store, ctl.WriterEpoch))
		want := func(name string, lo, hi float64) {
			t.Helper()
			got, ok := gaugeValues(t, reg)[name]
			if !ok || got < lo || got > hi {
				t.Errorf("%s = %v (present %v), want in [%v, %v]", name, got, ok, lo, hi)
			}
		}
		want("idem_store_up", 1, 1)
		want("idem_draining", 0, 0)
		want("idem_draining_seconds", 0, 0)
		want("idem_writer_fenced", 0, 0)
		want("idem_writer_fenced_seconds", 0, 0)
		want("idem_writer_epoch", float64(ctl.WriterEpoch), float64(ctl.WriterEpoch))

		if err := store.SetDraining(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		hour := time.Hour.Seconds()
		want("idem_draining", 1, 1)
		want("idem_draining_seconds", hour, hour+time.Since(changed.Add(time.Hour)).Seconds()+1)
		want("idem_writer_fenced", 0, 0)

		if _, err := store.BumpEpoch(t.Context()); err != nil {
			t.Fatal(err)
		}
		want("idem_writer_epoch", float64(ctl.WriterEpoch+1), float64(ctl.WriterEpoch+1))
		want("idem_writer_fenced", 1, 1)
		want("idem_writer_fenced_seconds", hour, hour+time.Since(changed.Add(time.Hour)).Seconds()+1)

		store.Close()
		got := gaugeValues(t, reg)
		if up, ok := got["idem_store_up"]; !ok || up != 0 {
			t.Errorf("closed registry: idem_store_up = %v (present %v), want 0", up, ok)
		}
		for _, name := range []string{"idem_draining", "idem_draining_seconds", "idem_writer_epoch", "idem_writer_fenced", "idem_writer_fenced_seconds"} {
			if v, ok := got[name]; ok {
				t.Errorf("closed registry: %s = %v reported; want it left out", name, v)
			}
		}
	})
}
