package idemsqlite

import (
	"context"
	"database/sql"
	"embed"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed tenant.sql
var tenantFiles embed.FS

// tenantQueries holds the named statements of tenant.sql. They are not
// prepared: they are operator commands.
var tenantQueries = sqlfile.MustLoad(tenantFiles, "tenant.sql")

// The tenant fence (migration 015): a row of idem_tenant_fences makes the
// database's triggers refuse, with RAISE(ABORT, 'idem: tenant moved …'),
// every write that could change an outcome of the tenant's records, and
// translate turns that into registry.ErrTenantMoved. A refused claim is
// lost before the business function runs; a refused Complete rolls back
// its transaction, business writes included.

// FenceTenant fences the tenant; see registry.TenantMover. The insert
// commits durably. ctx governs the call.
func (s *Store) FenceTenant(ctx context.Context, tenant, movedTo string) error {
	h := registry.TenantHash(tenant)
	return s.writeTx(ctx, "fence tenant", func(tx *sql.Tx, now any) error {
		_, err := tx.ExecContext(ctx, tenantQueries.Get("FenceTenant"), now, h[:], movedTo)
		return err
	})
}

// UnfenceTenant removes the tenant's fence, if any; see
// registry.TenantMover. ctx governs the call.
func (s *Store) UnfenceTenant(ctx context.Context, tenant string) error {
	h := registry.TenantHash(tenant)
	return s.writeTx(ctx, "unfence tenant", func(tx *sql.Tx, _ any) error {
		_, err := tx.ExecContext(ctx, tenantQueries.Get("UnfenceTenant"), h[:])
		return err
	})
}

// TenantInFlight counts the tenant's records, in one statement; see
// registry.TenantMover. ctx governs the query.
func (s *Store) TenantInFlight(ctx context.Context, tenant string) (registry.TenantCounts, error) {
	if err := s.checkOpen(); err != nil {
		return registry.TenantCounts{}, err
	}
	h := registry.TenantHash(tenant)
	now, _ := s.stamp()
	var c registry.TenantCounts
	err := s.db.QueryRowContext(ctx, tenantQueries.Get("TenantInFlight"), now, h[:]).
		Scan(&c.Records, &c.InFlight, &c.Unknown, &c.Tombstones, &c.Unattributed)
	if err != nil {
		return registry.TenantCounts{}, s.fail("tenant in flight", err)
	}
	return c, nil
}
