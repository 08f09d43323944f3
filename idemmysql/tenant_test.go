package idemmysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// TestFenceWaitsForEarlierWriters: a transaction that claimed and recorded
// an outcome of the tenant (ClaimAndExecute) before the fence committed,
// but has not committed itself, could commit after an export — no count
// of records in flight sees it. FenceTenant does not return while such a
// transaction is open (its metadata lock on idem_operations): bounded by
// its ctx, it ends with an error saying the fence holds but older
// transactions still run; once the transaction committed, FenceTenant
// (again: idempotent) returns and the record is there for the export to
// see; from then on nothing of the tenant is written.
// threat:tenant-split-brain
func TestFenceWaitsForEarlierWriters(t *testing.T) {
	t.Parallel()
	s, _, _ := openTest(t)
	ctx := t.Context()
	claim := func() registry.Claim {
		c := registry.Claim{Operation: "fence-wait", WriterEpoch: 1, Tenant: "acme"}
		rand.Read(c.Scope[:])
		rand.Read(c.Fingerprint[:])
		rand.Read(c.Owner[:])
		return c
	}
	c := claim()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	res, err := s.ClaimAndExecute(ctx, tx, c, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return registry.Outcome{
			State:    idem.StateSucceeded,
			Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte("before the fence")},
			Outbox:   []registry.Message{{Topic: "t", Payload: []byte("before the fence")}},
		}, nil
	})
	if err != nil || res.Verdict != registry.Execute {
		t.Fatalf("ClaimAndExecute: %v %v", res.Verdict, err)
	}

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.FenceTenant(short, "acme", "b"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("FenceTenant while an earlier writer of the tenant is open: %v, want it still waiting when its ctx ended", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.FenceTenant(ctx, "acme", "b"); err != nil {
		t.Fatalf("FenceTenant once the earlier writer committed: %v", err)
	}
	if got, err := s.Get(ctx, c.Scope); err != nil || got.OperationID != res.Record.OperationID {
		t.Errorf("the earlier writer's record after FenceTenant: %+v %v", got, err)
	}
	if _, _, err := s.Reserve(ctx, claim()); !errors.Is(err, registry.ErrTenantMoved) {
		t.Errorf("Reserve after the fence: %v, want ErrTenantMoved", err)
	}
}

// TestFenceRefusesOlderSnapshot: a REPEATABLE READ transaction that read
// before the fence committed — its snapshot has no fence — still cannot
// claim a scope of the tenant afterwards (ErrTenantMoved from the
// fence triggers: the claim's insert, the outcome's update), although
// FenceTenant, which waits only for transactions that touched
// idem_operations, returned before the claim.
// threat:tenant-split-brain
func TestFenceRefusesOlderSnapshot(t *testing.T) {
	t.Parallel()
	s, _, _ := openTest(t)
	ctx := t.Context()
	c := registry.Claim{Operation: "fence-snapshot", WriterEpoch: 1, Tenant: "acme"}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rand.Read(c.Owner[:])
	tx, err := s.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // rolled back below
	var fences int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM idem_tenant_fences").Scan(&fences); err != nil || fences != 0 {
		t.Fatalf("fences in the snapshot: %d %v", fences, err)
	}
	// It has not touched idem_operations: FenceTenant need not wait for
	// it, since its later writes meet the triggers.
	if err := s.FenceTenant(ctx, "acme", "b"); err != nil {
		t.Fatalf("FenceTenant while a transaction with an older snapshot is open: %v", err)
	}
	_, err = s.ClaimAndExecute(ctx, tx, c, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
		return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 201, MediaType: "text/plain", Body: []byte("x")}}, nil
	})
	if !errors.Is(err, registry.ErrTenantMoved) {
		t.Errorf("a claim of the fenced tenant in a snapshot older than the fence: %v, want ErrTenantMoved", err)
	}
	_ = tx.Rollback()
	if err := s.FenceTenant(ctx, "acme", "b"); err != nil {
		t.Fatalf("FenceTenant once the older transaction ended: %v", err)
	}
	if _, err := s.Get(ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("the refused claim's record: %v, want ErrNotFound", err)
	}
}
