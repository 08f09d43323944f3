package registrytest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// mover returns the store's registry.TenantMover; every driver has one.
func mover(t *testing.T, s registry.Store) registry.TenantMover {
	t.Helper()
	m, ok := s.(registry.TenantMover)
	if !ok {
		t.Fatalf("%T does not implement registry.TenantMover", s)
	}
	return m
}

// TenantFixture is what BuildTenant made of a tenant in a registry.
type TenantFixture struct {
	// Settled is a SUCCEEDED record (two outbox messages: one published,
	// one dead), Once one of ExecuteOnce, Retired a tombstone, Unknown an
	// UNKNOWN record with an effect, a lookup, a pending settlement and an
	// audit entry, Reconciled one settled by Reconcile.
	Settled, Once, Retired, Unknown, Reconciled registry.Record
	// Counts are what ExportTenant should report.
	Counts registry.TenantCounts
}

// BuildTenant gives tenant in st one record of every kind and every row
// that hangs off an operation (TenantFixture), plus a record of another
// tenant, with st's clock set through setNow from base on; the caller
// resets the clock. Drivers' cross-driver tests use it as the conformance
// cases do.
func BuildTenant(t *testing.T, st registry.Store, setNow func(time.Time), tenant string) TenantFixture {
	t.Helper()
	ctx := t.Context()
	rng := byte(1)
	claim := func(op string) registry.Claim {
		var c registry.Claim
		for i := range c.Scope {
			c.Scope[i], c.Fingerprint[i], c.Owner[i] = rng, rng^0x5a, 7
		}
		c.Scope[0] = byte(len(tenant))
		rng++
		c.Operation, c.Tenant, c.WriterEpoch = op, tenant, 7
		return c
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("building the tenant: %s: %v", what, err)
		}
	}
	reserve := func(c registry.Claim) registry.Record {
		t.Helper()
		rec, created, err := st.Reserve(ctx, c)
		if err != nil || !created {
			t.Fatalf("building the tenant: Reserve: %v %v", created, err)
		}
		return rec
	}
	var f TenantFixture
	setNow(base)
	expiring := claim("conformance.copy")
	expiring.Retention = retentionPeriod
	_, err := st.Complete(ctx, reserve(expiring), effect("retired", outcome("retired", 0)))
	must("Complete", err)
	setNow(base.Add(retentionPeriod + time.Minute))
	_, err = st.Prune(ctx, 100)
	must("Prune", err)
	f.Retired, err = st.Get(ctx, expiring.Scope)
	must("Get", err)
	if !f.Retired.Retired() {
		t.Fatalf("building the tenant: the expiring record was not retired")
	}

	f.Settled, err = st.Complete(ctx, reserve(claim("conformance.copy")), effect("settled", outcome("settled", 2)))
	must("Complete", err)
	must("MarkPublished", st.MarkPublished(ctx, []string{registry.MessageID(f.Settled.OperationID, 0)}))
	must("FailOutbox", st.FailOutbox(ctx, registry.OutboxFailure{ID: registry.MessageID(f.Settled.OperationID, 1), Error: "gone", Dead: true}))
	res, err := st.ExecuteOnce(ctx, claim("conformance.copy"), effect("once", outcome("once", 1)))
	must("ExecuteOnce", err)
	f.Once = res.Record

	for _, u := range []*registry.Record{&f.Unknown, &f.Reconciled} {
		rec := reserve(claim("conformance.copy"))
		_, err = st.BeginEffect(ctx, rec, "transfer", []byte("request\x00"))
		must("BeginEffect", err)
		rec, err = st.Get(ctx, rec.Scope)
		must("Get", err)
		*u, err = st.MarkUnknown(ctx, rec)
		must("MarkUnknown", err)
		_, err = st.RecordLookup(ctx, registry.Lookup{OperationID: u.OperationID, Effect: "transfer",
			DownstreamKey: registry.DownstreamKey(u.OperationID, "transfer"), Answer: registry.LookupDeclined,
			Detail: "asked", Actor: "alice"})
		must("RecordLookup", err)
	}
	_, _, err = st.RequestSettlement(ctx, registry.PendingSettlement{OperationID: f.Unknown.OperationID,
		Outcome: registry.EffectFailed, Evidence: "OPS-1", RequestedBy: "alice"})
	must("RequestSettlement", err)
	f.Reconciled, err = st.Reconcile(ctx, f.Reconciled.OperationID, reconciliation("bob"))
	must("Reconcile", err)
	_, err = st.AppendAudit(ctx, registry.AuditEntry{Actor: "carol", Action: "copy.check", OperationID: f.Unknown.OperationID, Detail: "looked"})
	must("AppendAudit", err)

	other := claim("conformance.copy")
	other.Tenant = tenant + "-neighbour"
	_, err = st.Complete(ctx, reserve(other), effect("other", outcome("other", 1)))
	must("Complete", err)
	f.Counts = registry.TenantCounts{Records: 5, Unknown: 1, Tombstones: 1, Effects: 2, Outbox: 3 + len64(reconciliation("x").Outbox)}
	return f
}

func len64[T any](s []T) int64 { return int64(len(s)) }

// testTenantCopy: ExportTenant refuses an unfenced tenant; on a fenced one
// it writes every row of the tenant and nothing of another, and
// ImportTenant into an empty registry recreates it so exactly that the
// target's own export is the same stream byte for byte; a settled key
// replays the byte-identical response there (digest verified) and the
// other kinds decide as on the source; a second import inserts nothing;
// a stream altered by one byte, or cut short, imports nothing; a target
// holding another record for one of the scopes refuses the whole import.
// threat:tenant-copy-altered
func testTenantCopy(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const tenant = "acme"
	src := mover(t, e.h.Store)
	f := BuildTenant(t, e.h.Store, e.setNow, tenant)

	var out bytes.Buffer
	if _, err := src.ExportTenant(e.ctx, tenant, &out); err == nil || out.Len() != 0 {
		t.Errorf("ExportTenant of an unfenced tenant: %v, %d bytes written; want an error and nothing", err, out.Len())
	}
	if err := src.FenceTenant(e.ctx, tenant, "target"); err != nil {
		t.Fatal(err)
	}
	counts, err := src.ExportTenant(e.ctx, tenant, &out)
	if err != nil || counts != f.Counts {
		t.Fatalf("ExportTenant: %+v %v, want %+v", counts, err, f.Counts)
	}
	stream := out.Bytes()

	th := nh(t)
	dst := mover(t, th.Store)
	for name, broken := range map[string][]byte{
		"altered":   bytes.Replace(stream, []byte(`"state":"SUCCEEDED"`), []byte(`"state":"FAILED_FINAL"`), 1),
		"truncated": stream[:bytes.LastIndexByte(stream[:len(stream)-1], '\n')+1],
		"appended":  append(bytes.Clone(stream), stream[:bytes.IndexByte(stream, '\n')+1]...),
	} {
		if _, err := dst.ImportTenant(e.ctx, bytes.NewReader(broken)); !errors.Is(err, registry.ErrTenantStream) {
			t.Errorf("ImportTenant of a stream %s: %v, want ErrTenantStream", name, err)
		}
	}
	if got, err := dst.TenantInFlight(e.ctx, tenant); err != nil || got.Records != 0 {
		t.Fatalf("after refused imports the target holds %+v (%v), want nothing", got, err)
	}

	got, err := dst.ImportTenant(e.ctx, bytes.NewReader(stream))
	if err != nil || got != f.Counts {
		t.Fatalf("ImportTenant: %+v %v, want %+v", got, err, f.Counts)
	}
	again, err := dst.ImportTenant(e.ctx, bytes.NewReader(stream))
	if err != nil || again != (registry.TenantCounts{}) {
		t.Errorf("ImportTenant again: %+v %v, want nothing inserted and no error", again, err)
	}

	// The target answers as the source did.
	for _, want := range []registry.Record{f.Settled, f.Once, f.Retired, f.Unknown, f.Reconciled} {
		rec, err := th.Store.Get(e.ctx, want.Scope)
		if err != nil || rec.OperationID != want.OperationID || rec.State != want.State || rec.Retired() != want.Retired() ||
			rec.TenantHash != registry.TenantHash(tenant) || !rec.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("on the target, %s: %+v %v", want.OperationID, rec, err)
			continue
		}
		if want.Response != nil && !sameResponse(rec.Response, *want.Response) {
			t.Errorf("on the target, %s replays %+v, want %+v", want.OperationID, rec.Response, want.Response)
		}
		if v := registry.Decide(rec, false, want.Fingerprint); v != registry.Decide(want, false, want.Fingerprint) {
			t.Errorf("on the target, %s decides %v", want.OperationID, v)
		}
	}
	CheckTenantRows(t, th.Store, f)
	// Every row came along: the target's own export is the same stream.
	if err := dst.FenceTenant(e.ctx, tenant, "back"); err != nil {
		t.Fatal(err)
	}
	var back bytes.Buffer
	if _, err := dst.ExportTenant(e.ctx, tenant, &back); err != nil || !bytes.Equal(back.Bytes(), stream) {
		t.Errorf("the target's export differs from the source's (%v):\n%s\nwant\n%s", err, back.Bytes(), stream)
	}

	// A target that holds another record for one of the scopes.
	ch := nh(t)
	clash := registry.Claim{Scope: f.Once.Scope, Fingerprint: f.Once.Fingerprint, Operation: f.Once.Operation,
		Owner: f.Once.Owner, Tenant: tenant, WriterEpoch: 7}
	if _, created, err := ch.Store.Reserve(e.ctx, clash); err != nil || !created {
		t.Fatalf("Reserve on the clashing target: %v %v", created, err)
	}
	if _, err := mover(t, ch.Store).ImportTenant(e.ctx, bytes.NewReader(stream)); !errors.Is(err, registry.ErrTenantImportConflict) {
		t.Errorf("ImportTenant over a different record: %v, want ErrTenantImportConflict", err)
	}
	if got, err := mover(t, ch.Store).TenantInFlight(e.ctx, tenant); err != nil || got.Records != 1 {
		t.Errorf("after the refused import the clashing target holds %+v (%v), want its one record", got, err)
	}
}

// CheckTenantRows checks that st holds the rows hanging off f's
// operations as BuildTenant made them: the effect attempt with its
// request, the lookup and the pending settlement of Unknown, the
// reconciliation of Reconciled, the audit entry about Unknown, Settled's
// outbox messages (one published, one dead).
func CheckTenantRows(t *testing.T, st registry.Store, f TenantFixture) {
	t.Helper()
	ctx := t.Context()
	effs, err := st.Effects(ctx, f.Unknown.OperationID)
	if err != nil || len(effs) != 1 || !bytes.Equal(effs[0].Request, []byte("request\x00")) {
		t.Errorf("effects of %s: %+v %v, want the one attempt with its request", f.Unknown.OperationID, effs, err)
	}
	looks, err := st.Lookups(ctx, f.Unknown.OperationID)
	if err != nil || len(looks) != 1 || looks[0].Actor != "alice" || looks[0].Answer != registry.LookupDeclined {
		t.Errorf("lookups of %s: %+v %v, want alice's", f.Unknown.OperationID, looks, err)
	}
	if p, err := st.PendingSettlement(ctx, f.Unknown.OperationID); err != nil || p.RequestedBy != "alice" || p.Evidence != "OPS-1" {
		t.Errorf("pending settlement of %s: %+v %v", f.Unknown.OperationID, p, err)
	}
	recons, err := st.Reconciliations(ctx, f.Reconciled.OperationID)
	if err != nil || len(recons) != 1 || recons[0].Actor != "bob" {
		t.Errorf("reconciliations of %s: %+v %v, want bob's", f.Reconciled.OperationID, recons, err)
	}
	audit, err := st.AuditLog(ctx, registry.AuditFilter{OperationID: f.Unknown.OperationID})
	if err != nil || len(audit) != 1 || audit[0].Actor != "carol" || audit[0].Action != "copy.check" {
		t.Errorf("audit entries of %s: %+v %v, want carol's", f.Unknown.OperationID, audit, err)
	}
	msgs, err := st.OperationOutbox(ctx, f.Settled.OperationID)
	if err != nil || len(msgs) != 2 || msgs[0].PublishedAt.IsZero() || msgs[1].DeadAt.IsZero() {
		t.Errorf("outbox of %s: %+v %v, want one published and one dead message", f.Settled.OperationID, msgs, err)
	}
}
