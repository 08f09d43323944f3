package registrytest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// countTenant counts the records whose stored tenant_hash is the given one.
const countTenant = `SELECT count(*) FROM idem_operations WHERE tenant_hash = $1`

// fencer returns the store's registry.TenantFencer; every driver has one.
func (e *env) fencer() registry.TenantFencer {
	e.t.Helper()
	f, ok := e.h.Store.(registry.TenantFencer)
	if !ok {
		e.t.Fatalf("%T does not implement registry.TenantFencer", e.h.Store)
	}
	return f
}

// tenantClaim is e.claim for tenant.
func (e *env) tenantClaim(operation, tenant string) registry.Claim {
	c := e.claim(operation)
	c.Tenant = tenant
	return c
}

// hostileTenants are tenants no text column would take as they are.
var hostileTenants = map[string]string{
	"empty":        "",
	"nul":          "acme\x00evil",
	"invalid utf8": "\xff\xfe\xc3\x28",
	"huge":         strings.Repeat("t", 1<<20),
	"plain":        "acme",
}

// testTenantAttribution: every insert path — Reserve, ExecuteOnce and the
// in-transaction claim — stores registry.TenantHash of the claim's tenant
// and reads it back into Record.TenantHash; a tenant of hostile bytes (NUL,
// invalid UTF-8, a megabyte) is accepted, only its hash stored; the
// database refuses a tenant_hash that is not 32 bytes and a change of a
// record's tenant.
// threat:tenant-bytes-5xx
func testTenantAttribution(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	for name, tenant := range hostileTenants {
		want := registry.TenantHash(tenant)
		var recs []registry.Record
		rec, created, err := e.h.Store.Reserve(e.ctx, e.tenantClaim("conformance.tenant", tenant))
		if err != nil || !created {
			t.Fatalf("Reserve for tenant %s: created=%v err=%v", name, created, err)
		}
		recs = append(recs, rec)
		res, err := e.h.Store.ExecuteOnce(e.ctx, e.tenantClaim("conformance.tenant", tenant), effect("once", outcome("tenant", 1)))
		if err != nil || res.Verdict != registry.Execute {
			t.Fatalf("ExecuteOnce for tenant %s: %v %v", name, res.Verdict, err)
		}
		recs = append(recs, res.Record)
		res, err = e.h.ClaimAndExecute(e.ctx, e.tenantClaim("conformance.tenant", tenant), effect("claim", outcome("tenant", 0)))
		if err != nil || res.Verdict != registry.Execute {
			t.Fatalf("ClaimAndExecute for tenant %s: %v %v", name, res.Verdict, err)
		}
		recs = append(recs, res.Record)
		for i, r := range recs {
			if r.TenantHash != want {
				t.Errorf("tenant %s, path %d: returned TenantHash %x, want %x", name, i, r.TenantHash, want)
			}
			got, err := e.h.Store.GetByID(e.ctx, r.OperationID)
			if err != nil || got.TenantHash != want {
				t.Errorf("tenant %s, path %d: read back TenantHash %x (%v), want %x", name, i, got.TenantHash, err, want)
			}
		}
		if n := e.count(countTenant, want[:]); n != int64(len(recs)) {
			t.Errorf("tenant %s: %d records store its hash, want %d", name, n, len(recs))
		}
	}
	if a, b := registry.TenantHash("a"), registry.TenantHash("a\x00"); a == b {
		t.Errorf("TenantHash does not tell %q from %q", "a", "a\x00")
	}

	rec := e.reserve(e.tenantClaim("conformance.tenant", "acme"))
	other := registry.TenantHash("other")
	if err := e.h.Exec(e.ctx, `UPDATE idem_operations SET tenant_hash = $1 WHERE operation_id = $2`, other[:], rec.OperationID); err == nil {
		t.Errorf("the database let a record's tenant change")
	}
	if err := e.h.Exec(e.ctx, `UPDATE idem_operations SET tenant_hash = NULL WHERE operation_id = $1`, rec.OperationID); err == nil {
		t.Errorf("the database let a record's tenant be dropped")
	}
	scope := e.bytes32()
	err := e.h.Exec(e.ctx, `INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
		state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at, tenant_hash)
		SELECT $1, $2, operation, owner, fingerprint, contract, state, 1, writer_epoch,
		       lease_until, expires_at, created_at, updated_at, $3
		FROM idem_operations WHERE operation_id = $4`,
		scope[:], idem.NewOperationID(base, idem.ScopeHash(scope)), other[:31], rec.OperationID)
	if err == nil {
		t.Errorf("the database stored a tenant_hash of 31 bytes")
	}
}

// testTenantFence: once a tenant is fenced, the database refuses every
// write that could change its outcomes — a new scope by Reserve,
// ExecuteOnce or the in-transaction claim, Complete of one in flight
// (its business writes and outbox rolled back), Release, TakeOver, ExtendLease,
// MarkUnknown, BeginEffect, and a writer going around the Store with SQL
// — with registry.ErrTenantMoved; reads and replays of its settled
// records still answer; another tenant is untouched; UnfenceTenant
// restores the writes. FenceTenant is idempotent.
// threat:tenant-split-brain
func testTenantFence(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	f := e.fencer()
	const tenant, neighbour = "acme", "globex"
	settled := e.complete(e.reserve(e.tenantClaim("conformance.fence", tenant)), outcome("settled", 1))
	onceClaim := e.tenantClaim("conformance.fence", tenant)
	if res, err := e.h.Store.ExecuteOnce(e.ctx, onceClaim, effect("once", outcome("once", 0))); err != nil || res.Verdict != registry.Execute {
		t.Fatalf("ExecuteOnce: %v %v", res.Verdict, err)
	}
	inflight := e.reserve(e.tenantClaim("conformance.fence", tenant))
	expiring := e.tenantClaim("conformance.fence", tenant)
	expiring.Lease = time.Second
	abandoned := e.reserve(expiring)
	theirs := e.reserve(e.tenantClaim("conformance.fence", neighbour))
	calling := e.reserve(e.tenantClaim("conformance.fence", tenant))
	e.beginEffect(calling, "transfer")
	calling, err := e.h.Store.Get(e.ctx, calling.Scope) // now EXECUTING
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	unknown := e.unknown(e.tenantClaim("conformance.fence", tenant))

	if err := f.FenceTenant(e.ctx, tenant, "shard-b"); err != nil {
		t.Fatalf("FenceTenant: %v", err)
	}
	if err := f.FenceTenant(e.ctx, tenant, "shard-c"); err != nil {
		t.Fatalf("FenceTenant again: %v", err)
	}
	e.setNow(base.Add(time.Minute)) // abandoned's lease has expired

	records, effects, outbox := e.count(countRecords), e.count(countAllEffects), e.count(countAllOutbox)
	var created bool
	moved := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, registry.ErrTenantMoved) {
			t.Errorf("%s of the fenced tenant: %v, want ErrTenantMoved", what, err)
		}
	}
	c := e.tenantClaim("conformance.fence", tenant)
	_, created, err = e.h.Store.Reserve(e.ctx, c)
	moved("Reserve of a new scope", err)
	if created {
		t.Errorf("Reserve of the fenced tenant created a record")
	}
	c.MaxActive = 100
	_, _, err = e.h.Store.Reserve(e.ctx, c)
	moved("Reserve (MaxActive) of a new scope", err)
	_, err = e.h.Store.ExecuteOnce(e.ctx, e.tenantClaim("conformance.fence", tenant), effect("once", outcome("once", 1)))
	moved("ExecuteOnce of a new scope", err)
	_, err = e.h.ClaimAndExecute(e.ctx, e.tenantClaim("conformance.fence", tenant), effect("claim", outcome("claim", 1)))
	moved("ClaimAndExecute of a new scope", err)
	_, err = e.h.Store.Complete(e.ctx, inflight, effect("complete", outcome("complete", 2)))
	moved("Complete of a record in flight", err)
	moved("Release", e.h.Store.Release(e.ctx, inflight))
	_, err = e.h.Store.TakeOver(e.ctx, abandoned, time.Minute)
	moved("TakeOver of an expired record", err)
	_, err = e.h.Store.ExtendLease(e.ctx, inflight, time.Minute)
	moved("ExtendLease", err)
	_, err = e.h.Store.BeginEffect(e.ctx, inflight, "transfer", nil)
	moved("BeginEffect", err)
	_, err = e.h.Store.MarkUnknown(e.ctx, calling)
	moved("MarkUnknown", err)
	_, err = e.h.Store.Reconcile(e.ctx, unknown.OperationID, reconciliation("fenced"))
	moved("Reconcile", err)
	err = e.h.Store.RecordEffect(e.ctx, calling, "transfer", "h-1", registry.EffectSucceeded, []byte("answer"))
	moved("RecordEffect", err)
	if err := e.h.Exec(e.ctx, `UPDATE idem_operations SET state = 'EXECUTING' WHERE operation_id = $1`, inflight.OperationID); err == nil {
		t.Errorf("an UPDATE going around the Store moved a fenced tenant's record")
	}
	if n := e.count(countRecords); n != records {
		t.Errorf("%d records after the refused writes, want %d", n, records)
	}
	if n := e.count(countAllEffects); n != effects {
		t.Errorf("%d business rows after the refused writes, want %d: a refused write committed its business rows", n, effects)
	}
	if n := e.count(countAllOutbox); n != outbox {
		t.Errorf("%d outbox rows after the refused writes, want %d", n, outbox)
	}
	for _, r := range []registry.Record{inflight, abandoned, calling, unknown} {
		if st, gen := e.state(r.Scope); st != r.State || gen != r.OwnerGen {
			t.Errorf("a fenced record moved: %s gen %d, was %s gen %d", st, gen, r.State, r.OwnerGen)
		}
	}
	if effs := e.effectsOf(calling.OperationID); effs["transfer"].Result != "" {
		t.Errorf("a fenced effect got a result: %+v", effs["transfer"])
	}

	// Reads and replays still answer.
	got, err := e.h.Store.Get(e.ctx, settled.Scope)
	if err != nil || !sameResponse(got.Response, *settled.Response) {
		t.Errorf("Get of a settled record of the fenced tenant: %+v %v", got.Response, err)
	}
	rec, created, err := e.h.Store.Reserve(e.ctx, e.replayOf(settled, tenant))
	if err != nil || created || rec.OperationID != settled.OperationID || !sameResponse(rec.Response, *settled.Response) {
		t.Errorf("replay by Reserve of the fenced tenant: id %q created=%v err=%v", rec.OperationID, created, err)
	}
	res, err := e.h.Store.ExecuteOnce(e.ctx, onceClaim, effect("again", outcome("again", 0)))
	if err != nil || res.Verdict != registry.Replay {
		t.Errorf("replay by ExecuteOnce of the fenced tenant: %v %v, want replay", res.Verdict, err)
	}

	// Another tenant is not fenced.
	if _, err := e.h.Store.Complete(e.ctx, theirs, effect("theirs", outcome("theirs", 1))); err != nil {
		t.Errorf("Complete of another tenant: %v", err)
	}
	e.reserve(e.tenantClaim("conformance.fence", neighbour))

	// The relay leaves the fenced tenant's pending messages to its new
	// registry and delivers the others.
	relayed := func() map[string]bool {
		t.Helper()
		msgs, err := e.h.Store.ClaimOutbox(e.ctx, 100, time.Minute)
		if err != nil {
			t.Fatalf("ClaimOutbox: %v", err)
		}
		ops := map[string]bool{}
		for _, m := range msgs {
			ops[m.OperationID] = true
		}
		return ops
	}
	if ops := relayed(); ops[settled.OperationID] || !ops[theirs.OperationID] {
		t.Errorf("the relay claimed messages of %v; want the other tenant's %s and not the fenced %s",
			ops, theirs.OperationID, settled.OperationID)
	}

	if counts, err := f.TenantInFlight(e.ctx, tenant); err != nil || counts.Records != 6 {
		t.Errorf("TenantInFlight of the fenced tenant: %+v %v, want 6 records", counts, err)
	}

	// Unfenced, the writes go through again.
	if err := f.UnfenceTenant(e.ctx, tenant); err != nil {
		t.Fatalf("UnfenceTenant: %v", err)
	}
	if err := f.UnfenceTenant(e.ctx, tenant); err != nil {
		t.Fatalf("UnfenceTenant again: %v", err)
	}
	done, err := e.h.Store.Complete(e.ctx, inflight, effect("complete", outcome("complete", 2)))
	if err != nil || done.State != idem.StateSucceeded {
		t.Errorf("Complete after UnfenceTenant: %v %v", done.State, err)
	}
	if n := e.outbox(inflight.OperationID); n != 2 {
		t.Errorf("outbox rows of the completed record: %d, want 2", n)
	}
	if ops := relayed(); !ops[settled.OperationID] || !ops[inflight.OperationID] {
		t.Errorf("after UnfenceTenant the relay claimed messages of %v; want %s's and %s's", ops, settled.OperationID, inflight.OperationID)
	}
	e.reserve(e.tenantClaim("conformance.fence", tenant))
}

// replayOf is a claim for rec's scope and fingerprint by tenant.
func (e *env) replayOf(rec registry.Record, tenant string) registry.Claim {
	c := e.tenantClaim(rec.Operation, tenant)
	c.Scope, c.Fingerprint, c.Owner = rec.Scope, rec.Fingerprint, rec.Owner
	return c
}

// testTenantInFlight: TenantInFlight counts the tenant's records, those
// RESERVED or EXECUTING with a live lease (an expired one does not count),
// its UNKNOWN ones and its tombstones, and the registry's unattributed
// records (tenant_hash NULL); another tenant's records are not counted.
func testTenantInFlight(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	f := e.fencer()
	const tenant = "acme"
	zero, err := f.TenantInFlight(e.ctx, tenant)
	if err != nil || zero != (registry.TenantCounts{}) {
		t.Fatalf("TenantInFlight of an empty registry: %+v %v", zero, err)
	}
	e.complete(e.reserve(e.tenantClaim("conformance.inflight", tenant)), outcome("done", 0))
	live := e.reserve(e.tenantClaim("conformance.inflight", tenant))
	short := e.tenantClaim("conformance.inflight", tenant)
	short.Lease = time.Second
	e.reserve(short)
	e.unknown(e.tenantClaim("conformance.inflight", tenant))
	e.reserve(e.tenantClaim("conformance.inflight", "globex"))
	e.unknown(e.tenantClaim("conformance.inflight", "globex"))
	// An unattributed record, as one made before tenants were recorded.
	err = e.h.Exec(e.ctx, `INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
		state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at)
		SELECT $1, $2, operation, owner, fingerprint, contract, state, 1, writer_epoch,
		       lease_until, expires_at, created_at, updated_at
		FROM idem_operations WHERE operation_id = $3`,
		bytes.Repeat([]byte{7}, 32), idem.NewOperationID(base, idem.ScopeHash(bytes.Repeat([]byte{7}, 32))), live.OperationID)
	if err != nil {
		t.Fatalf("inserting an unattributed record: %v", err)
	}
	e.setNow(base.Add(10 * time.Second)) // short's lease has expired
	got, err := f.TenantInFlight(e.ctx, tenant)
	want := registry.TenantCounts{Records: 4, InFlight: 1, Unknown: 1, Unattributed: 1}
	if err != nil || got != want {
		t.Errorf("TenantInFlight = %+v %v, want %+v", got, err, want)
	}
	if rec, err := e.h.Store.Get(e.ctx, idem.ScopeHash(bytes.Repeat([]byte{7}, 32))); err != nil || rec.TenantHash != ([32]byte{}) {
		t.Errorf("an unattributed record reads back TenantHash %x (%v), want zero", rec.TenantHash, err)
	}
}
