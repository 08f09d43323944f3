package idempg

import (
	"context"
	"embed"
	"fmt"

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

// FenceTenant fences the tenant; see registry.TenantMover. The insert
// commits durably. ctx governs the statement.
func (s *Store) FenceTenant(ctx context.Context, tenant, movedTo string) error {
	h := registry.TenantHash(tenant)
	now, _ := s.clock()
	if _, err := s.pool.Exec(ctx, tenantQueries.Get("FenceTenant"), h[:], movedTo, now); err != nil {
		return fmt.Errorf("idempg: fence tenant: %w", translate(err))
	}
	return nil
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
