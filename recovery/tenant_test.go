package recovery

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// TestRecoveryLeavesMovedTenant: on a registry that fenced a tenant (it
// moved to another registry), a round of recovery leaves that tenant's
// expired EXECUTING and UNKNOWN records as they are — their copies are
// recovered on the new registry — and does not report the fence's
// refusals as a failed round.
// threat:tenant-split-brain
func TestRecoveryLeavesMovedTenant(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, e *env) {
		c := e.claim(opTransfer)
		c.Tenant = "acme"
		expired, _ := e.executing(c, false)
		c = e.claim(opTransfer)
		c.Tenant = "acme"
		u, _ := e.executing(c, false)
		unknown, err := e.store.MarkUnknown(e.ctx, e.get(u.Scope))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.(registry.TenantFencer).FenceTenant(e.ctx, "acme", "b"); err != nil {
			t.Fatal(err)
		}
		e.setNow(base.Add(time.Hour))
		rep, err := e.worker(e.store).RunOnce(e.ctx)
		if err != nil || rep.Recovered+rep.Unknown+rep.Reconciled != 0 {
			t.Errorf("RunOnce = %+v, %v; want nothing done and no error", rep, err)
		}
		if got := e.get(expired.Scope); got.State != idem.StateExecuting || got.OwnerGen != expired.OwnerGen {
			t.Errorf("the moved tenant's expired record: %s gen %d, want EXECUTING gen %d", got.State, got.OwnerGen, expired.OwnerGen)
		}
		if got := e.get(unknown.Scope); got.State != idem.StateUnknown {
			t.Errorf("the moved tenant's UNKNOWN record: %s", got.State)
		}
	})
}
