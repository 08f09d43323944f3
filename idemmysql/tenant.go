package idemmysql

import (
	"context"
	"embed"
	"fmt"
	"time"

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

// fenceWaitPoll is how often FenceTenant looks whether the transactions
// open when the fence committed have ended.
const fenceWaitPoll = 10 * time.Millisecond

// openTrx names an InnoDB transaction: its server thread and the second
// it began.
type openTrx struct{ thread, started int64 }

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
// client can read, so the driver lists the open transactions in
// information_schema.INNODB_TRX (the server thread and the second each
// began) and waits until none of them is still listed. It waits for
// every open transaction of the server, reading ones and those of other
// databases included — it cannot tell tenants apart — so a session left
// idle in a transaction holds it up; and a thread that ends its
// transaction and begins another within the same second is taken for the
// same transaction (a longer wait, never a shorter one). Reading
// INNODB_TRX takes the PROCESS privilege: without it the fence holds but
// FenceTenant returns the error. The list is polled every 10 ms; ctx
// governs the insert and the wait, and when ctx ends first the fence
// stays and the error says the wait did not finish (call FenceTenant
// again).
func (s *Store) FenceTenant(ctx context.Context, tenant, movedTo string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	h := registry.TenantHash(tenant)
	if _, err := exec(ctx, s.db, tenantQueries.Get("FenceTenant"), s.nowParam(), h[:], movedTo); err != nil {
		return s.fail("fence tenant", err)
	}
	before, err := s.openTransactions(ctx)
	if err != nil {
		return s.fail("fence tenant: the fence holds, but listing the transactions older than it failed", err)
	}
	tick := time.NewTicker(fenceWaitPoll)
	defer tick.Stop()
	for len(before) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("idemmysql: fence tenant: the fence holds, but transactions older than it are still running: %w", ctx.Err())
		case <-tick.C:
		}
		now, err := s.openTransactions(ctx)
		if err != nil {
			return s.fail("fence tenant: the fence holds, but waiting for earlier writers failed", err)
		}
		for t := range before {
			if !now[t] {
				delete(before, t)
			}
		}
	}
	return nil
}

// openTransactions lists the InnoDB transactions open now, other than
// the session's own.
func (s *Store) openTransactions(ctx context.Context) (map[openTrx]bool, error) {
	rows, err := queryRows(ctx, s.db, tenantQueries.Get("OpenTransactions"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[openTrx]bool{}
	for rows.Next() {
		var t openTrx
		if err := rows.Scan(&t.thread, &t.started); err != nil {
			return nil, err
		}
		out[t] = true
	}
	return out, rows.Err()
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
