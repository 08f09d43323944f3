package idemhttp_test

import (
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

// TestEffectShadow: an effect-bearing operation in shadow executes a new
// key exactly as enforce — its downstream key recorded (registry effect
// row) before the call, the rendered outcome stored — and answers a retry
// from the record even though it was never enforced: a plain
// re-execution would call the downstream under a key no record holds.
// Proves threat:shadow-crash-reexecution (docs/threat-model.md).
func TestEffectShadow(t *testing.T) {
	pgtest.EachDriver(t, "eff.db", func(t *testing.T, _, dsn string) {
		b := newEffBench(t, dsn, func(mw *idemhttp.Middleware) { mw.Operation.Mode = idemhttp.Shadow })
		first := b.post(t, "e1", "send")
		if first.status != 201 || first.op() == "" {
			t.Fatalf("shadow, new key: %v", first)
		}
		if res := b.result(); res != "ok" {
			t.Errorf("Effect: %s", res)
		}
		effs, err := b.store.Effects(t.Context(), first.op())
		if err != nil || len(effs) != 1 || effs[0].DownstreamKey != registry.DownstreamKey(first.op(), "send") || effs[0].Result != registry.EffectSucceeded {
			t.Fatalf("effects of %s: %+v, %v; want the send effect, succeeded, under its downstream key", first.op(), effs, err)
		}
		again := b.post(t, "e1", "send")
		if again.status != 201 || !again.replayed() || string(again.body) != string(first.body) {
			t.Errorf("shadow retry: %v, want the replay of %v", again, first)
		}
		if posts, _ := b.bank.calls(); posts != 1 || b.runs.Load() != 1 {
			t.Errorf("downstream called %d times, handler ran %d; want 1 and 1", posts, b.runs.Load())
		}
	})
}
