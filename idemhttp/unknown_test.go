package idemhttp_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/registry"
)

func TestUnknownCollector(t *testing.T) {
	stores(t, func(t *testing.T, store registry.Store) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(idemhttp.NewUnknownCollector(store))
		expect := func(n string) {
			t.Helper()
			want := "# HELP idem_unknown_operations Operations whose outcome is UNKNOWN and awaits reconciliation (saturates at 10000).\n# TYPE idem_unknown_operations gauge\nidem_unknown_operations " + n + "\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idem_unknown_operations"); err != nil {
				t.Error(err)
			}
		}
		expect("0")
		// Two operations driven to UNKNOWN through the registry: reserve,
		// begin an effect (EXECUTING), mark unknown.
		var ids []string
		for i, op := range []string{"x", "y"} {
			rec, _, err := store.Reserve(t.Context(), registry.Claim{Scope: idem.ScopeHash{byte(i + 1)}, Fingerprint: idem.Fingerprint{1}, Operation: op})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.BeginEffect(t.Context(), rec, "send", []byte(`{"n":1}`)); err != nil {
				t.Fatal(err)
			}
			if rec, err = store.Get(t.Context(), rec.Scope); err != nil {
				t.Fatal(err)
			}
			if _, err := store.MarkUnknown(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.OperationID)
		}
		expect("2")
		byOp := func(want string) {
			t.Helper()
			head := "# HELP idem_unknown_by_operation UNKNOWN operations by operation name (only names that have some; saturates with idem_unknown_operations).\n# TYPE idem_unknown_by_operation gauge\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(head+want), "idem_unknown_by_operation"); err != nil {
				t.Error(err)
			}
		}
		byOp("idem_unknown_by_operation{operation=\"x\"} 1\nidem_unknown_by_operation{operation=\"y\"} 1\n")
		// A reconciled operation is no longer counted.
		if _, err := store.Reconcile(t.Context(), ids[0], registry.Reconciliation{
			Outcome: idem.StateSucceeded, Response: idem.Response{Status: 200, Body: []byte("ok")},
			Method: registry.ReconcileOperator, Actor: "test", Evidence: "ticket 1",
		}); err != nil {
			t.Fatal(err)
		}
		expect("1")
		byOp("idem_unknown_by_operation{operation=\"y\"} 1\n")
		store.Close()
		if _, err := reg.Gather(); err == nil {
			t.Error("a failed registry query must fail the scrape, not report zero")
		}
	})
}
