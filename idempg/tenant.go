package idempg

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed tenant.sql
var tenantFS embed.FS

// tenantQueries holds the named statements of tenant.sql.
var tenantQueries = sqlfile.MustLoad(tenantFS, "tenant.sql")

// The tenant fence (migration 020): a row of idem_tenant_fences makes the
// database refuse, with SQLSTATE IDM03, every write that could change an
// outcome of the tenant's records — whatever statement, from whatever
// server — and translate turns that into registry.ErrTenantMoved. A
// refused Complete or ExecuteOnce aborts its transaction, so the business
// writes roll back with it.

// FenceTenant fences the tenant; see registry.TenantFencer. The insert
// commits durably; then FenceTenant waits until every transaction that
// had written anything when the fence committed has ended. A statement
// checks the fence when it runs, not when its transaction commits, so
// without the wait a write that ran just before the fence — an
// in-transaction claim and outcome (ClaimAndExecute) whose caller commits
// later, say, which no count of records in flight sees until it commits —
// could commit after FenceTenant returned, and after an export. Once
// FenceTenant returns, nothing of the tenant changes. The wait covers
// every writing transaction of the PostgreSQL cluster (transaction IDs
// are the cluster's; it cannot tell tenants apart), so a session left
// idle in a transaction holds it up; it is polled every 10 ms; ctx
// governs the insert and the wait, and
// when ctx ends first the fence stays and the error says the wait did not
// finish (call FenceTenant again).
func (s *Store) FenceTenant(ctx context.Context, tenant, movedTo string) error {
	h := registry.TenantHash(tenant)
	now, _ := s.clock()
	if _, err := s.pool.Exec(ctx, tenantQueries.Get("FenceTenant"), h[:], movedTo, now); err != nil {
		return fmt.Errorf("idempg: fence tenant: %w", translate(err))
	}
	var next int64
	if err := s.pool.QueryRow(ctx, tenantQueries.Get("NextXid")).Scan(&next); err != nil {
		return fmt.Errorf("idempg: fence tenant: waiting for earlier writers: %w", translate(err))
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var running bool
		if err := s.pool.QueryRow(ctx, tenantQueries.Get("WritersBefore"), next).Scan(&running); err != nil {
			return fmt.Errorf("idempg: fence tenant: the fence holds, but waiting for earlier writers failed: %w", translate(err))
		}
		if !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("idempg: fence tenant: the fence holds, but transactions older than it are still running: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// UnfenceTenant removes the tenant's fence, if any; see
// registry.TenantMover. ctx governs the statement.
func (s *Store) UnfenceTenant(ctx context.Context, tenant string) error {
	h := registry.TenantHash(tenant)
	if _, err := s.pool.Exec(ctx, tenantQueries.Get("UnfenceTenant"), h[:]); err != nil {
		return fmt.Errorf("idempg: unfence tenant: %w", translate(err))
	}
	return nil
}

// TenantInFlight counts the tenant's records, in one statement; see
// registry.TenantMover. ctx governs the statement.
func (s *Store) TenantInFlight(ctx context.Context, tenant string) (registry.TenantCounts, error) {
	h := registry.TenantHash(tenant)
	now, _ := s.clock()
	var c registry.TenantCounts
	err := s.pool.QueryRow(ctx, tenantQueries.Get("TenantInFlight"), h[:], now).
		Scan(&c.Records, &c.InFlight, &c.Unknown, &c.Tombstones, &c.Unattributed)
	if err != nil {
		return registry.TenantCounts{}, fmt.Errorf("idempg: tenant in flight: %w", translate(err))
	}
	return c, nil
}
