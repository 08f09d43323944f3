package idemmysql

import (
	"context"
	"embed"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed tenant.sql
var tenantFiles embed.FS

// tenantQueries holds the named statements of tenant.sql.
var tenantQueries = sqlfile.MustLoad(tenantFiles, "tenant.sql")

// The tenant fence (migration 006): a row of idem_tenant_fences makes the
// database refuse, with SQLSTATE IDM03 signalled by its triggers, every
// write that could change an outcome of the tenant's records — whatever
// statement, from whatever server — and translate turns that into
// registry.ErrTenantMoved. A refused Complete or ExecuteOnce aborts its
// transaction, so the business writes roll back with it.

// FenceTenant fences the tenant; see registry.TenantFencer. The insert
// commits (autocommit); then FenceTenant waits until every InnoDB
// transaction that was open when the fence committed has ended. A trigger
// checks the fence when its statement runs, not when its transaction
// commits, so without the wait a write that ran just before the fence —
// an in-transaction claim and outcome (ClaimAndExecute) whose caller
// commits later, which no count of records in flight sees until it
// commits — could commit after FenceTenant returned, and after an export.
// A transaction that begins after the fence committed sees it, and so,
// on MariaDB 10.11, does a later statement of a REPEATABLE READ
// transaction whose snapshot is older (the trigger's read happens inside
// an INSERT or UPDATE, which reads other tables with locks, the latest
// committed rows); the wait does not rely on that: such a transaction
// was open when the fence committed. Once FenceTenant returns, nothing
// of the tenant changes.
//
// How this differs from idempg: InnoDB has no transaction-ID horizon a
// client can read. Every transaction that has read or written
// idem_operations holds a shared metadata lock on it until it ends, so
// after the fence commits FenceTenant takes the table's write lock
// (LOCK TABLES … WRITE) on a connection of its own and releases it at
// once: that waits for every such transaction, of every tenant — a
// session left idle in a transaction holds it up — and while it waits,
// new statements on idem_operations queue behind it (a pause of the
// registry as long as the oldest open transaction; moves are rare). It
// takes the LOCK TABLES privilege. (Listing information_schema.INNODB_TRX
// instead was tried: on MariaDB 10.11 it kept listing a transaction of a
// connection long gone, and the wait never ended.) ctx governs the insert
// and the wait; when ctx ends first the fence stays and the error says
// the wait did not finish (call FenceTenant again).
func (s *Store) FenceTenant(ctx context.Context, tenant, movedTo string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	h := registry.TenantHash(tenant)
	if _, err := exec(ctx, s.db, tenantQueries.Get("FenceTenant"), s.nowParam(), h[:], movedTo); err != nil {
		return s.fail("fence tenant", err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return s.fail("fence tenant: the fence holds, but waiting for earlier writers failed", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, tenantQueries.Get("FenceWaitLock")); err != nil {
		return s.fail("fence tenant: the fence holds, but waiting for earlier writers failed", err)
	}
	if _, err := conn.ExecContext(ctx, tenantQueries.Get("FenceWaitUnlock")); err != nil {
		return s.fail("fence tenant: the fence holds, but releasing the wait's lock failed", err)
	}
	return nil
}

// UnfenceTenant removes the tenant's fence, if any; see
// registry.TenantMover. ctx governs the statement.
func (s *Store) UnfenceTenant(ctx context.Context, tenant string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	h := registry.TenantHash(tenant)
	if _, err := exec(ctx, s.db, tenantQueries.Get("UnfenceTenant"), h[:]); err != nil {
		return s.fail("unfence tenant", err)
	}
	return nil
}

// TenantInFlight counts the tenant's records, in one statement; see
// registry.TenantMover. ctx governs the statement.
func (s *Store) TenantInFlight(ctx context.Context, tenant string) (registry.TenantCounts, error) {
	if err := s.checkOpen(); err != nil {
		return registry.TenantCounts{}, err
	}
	h := registry.TenantHash(tenant)
	var c registry.TenantCounts
	err := queryRow(ctx, s.db, tenantQueries.Get("TenantInFlight"), s.nowParam(), h[:]).
		Scan(&c.Records, &c.InFlight, &c.Unknown, &c.Tombstones, &c.Unattributed)
	if err != nil {
		return registry.TenantCounts{}, s.fail("tenant in flight", err)
	}
	return c, nil
}
