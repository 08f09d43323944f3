package recovery

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// TestWorkerRecordsLookups: the worker's lookups are recorded on their
// effects with actor "recovery" — the executed answer with its handle, and
// the "not found" that preceded a re-send — so an operator's later
// decision is checked against them.
//
// threat:operator-contradicts-lookup
func TestWorkerRecordsLookups(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		done, doneEff := e.executing(e.claim(opTransfer), true)
		lost, lostEff := e.executing(e.claim(opTransfer), false)
		e.setNow(base.Add(time.Hour))
		if _, err := e.worker(e.store).RunOnce(e.ctx); err != nil {
			t.Fatal(err)
		}
		answer, _ := e.prov.Transfer(doneEff.DownstreamKey)
		for _, c := range []struct {
			id, key, answer string
		}{{done.OperationID, doneEff.DownstreamKey, registry.LookupExecuted}, {lost.OperationID, lostEff.DownstreamKey, registry.LookupNotFound}} {
			ls, err := e.store.Lookups(e.ctx, c.id)
			if err != nil || len(ls) != 1 {
				t.Fatalf("lookups of %s: %+v, %v; want the worker's one", c.id, ls, err)
			}
			l := ls[0]
			if l.Actor != Actor || l.DownstreamKey != c.key || l.Effect != effName || l.Answer != c.answer || !l.At.Equal(base.Add(time.Hour)) {
				t.Errorf("lookup of %s: %+v; want %s by %s at the store's now", c.id, l, c.answer, Actor)
			}
			if c.answer == registry.LookupExecuted && (l.Handle == "" || !strings.Contains(string(answer), `"`+l.Handle+`"`)) {
				t.Errorf("executed lookup's handle %q, want the provider's in %s", l.Handle, answer)
			}
		}
	})
}
