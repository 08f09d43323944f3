package effect_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// base is the injected "now" of the tests.
var base = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

// env is a real store with an injected clock and the real demo provider
// behind a real HTTP server.
type env struct {
	t     *testing.T
	ctx   context.Context
	store registry.Store
	now   atomic.Pointer[time.Time]
	prov  *provider.Server
	url   string
	set   effect.Set
}

func stores(t *testing.T, fn func(t *testing.T, e *env)) {
	pgtest.EachDriver(t, "effect.db", func(t *testing.T, _, dsn string) {
		e := &env{t: t, ctx: t.Context(), prov: provider.New()}
		e.setNow(base)
		st, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: func() time.Time { return *e.now.Load() }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		e.store = st
		srv := httptest.NewServer(e.prov.Handler())
		t.Cleanup(srv.Close)
		e.url = srv.URL
		e.set = effect.Set{payments.OperationTransfer: payments.TransferEffects(e.url, 0)}
		fn(t, e)
	})
}

func (e *env) setNow(t time.Time) { e.now.Store(&t) }

// unknown stores an UNKNOWN transfer whose effect attempt was begun; when
// sent, its request reached the provider with the downstream key first
// (answered as the provider's mode says).
func (e *env) unknown(sent bool) (registry.Record, registry.Effect) {
	e.t.Helper()
	c := registry.Claim{Operation: payments.OperationTransfer, Lease: 30 * time.Second}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rec, _, err := e.store.Reserve(e.ctx, c)
	if err != nil {
		e.t.Fatal(err)
	}
	req := []byte(`{"amount":"1.00","currency":"EUR","payee":"acct_1","reference":"` + rec.OperationID + `"}`)
	eff, err := e.store.BeginEffect(e.ctx, rec, payments.EffectTransfer, req)
	if err != nil {
		e.t.Fatal(err)
	}
	if sent {
		(&payments.ProviderClient{BaseURL: e.url}).Send(e.ctx, eff.DownstreamKey, req)
	}
	if rec, err = e.store.GetByID(e.ctx, rec.OperationID); err == nil {
		rec, err = e.store.MarkUnknown(e.ctx, rec)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return rec, eff
}

// reconcile is an operator's "idem ops reconcile" through the Set.
func (e *env) reconcile(id, outcome, handle, evidence, actor string) (effect.Settlement, error) {
	return e.set.SettleByOperator(e.ctx, e.store, effect.OperatorRequest{OperationID: id, Outcome: outcome, Handle: handle, Evidence: evidence, Actor: actor})
}

// unchanged fails unless id is still UNKNOWN with no reconciliation and
// its effect without a result.
func (e *env) unchanged(id string) {
	e.t.Helper()
	rec, err := e.store.GetByID(e.ctx, id)
	if err != nil || rec.State != idem.StateUnknown {
		e.t.Fatalf("operation %s: %s, %v; want it still UNKNOWN", id, rec.State, err)
	}
	if log, err := e.store.Reconciliations(e.ctx, id); err != nil || len(log) != 0 {
		e.t.Fatalf("operation %s: reconciliations %+v, %v; want none", id, log, err)
	}
	effs, err := e.store.Effects(e.ctx, id)
	if err != nil || len(effs) != 1 || effs[0].Result != "" {
		e.t.Fatalf("operation %s: effects %+v, %v; want one without a result", id, effs, err)
	}
}

// actions returns the audit log's actions about id, oldest first.
func (e *env) actions(id string) []string {
	e.t.Helper()
	log, err := e.store.AuditLog(e.ctx, registry.AuditFilter{OperationID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for i := len(log) - 1; i >= 0; i-- {
		out = append(out, log[i].Actor+" "+log[i].Action)
	}
	return out
}

// TestLookupBindsOperator: a lookup by an operator is recorded on the
// effect (what was asked, the answer, the handle, who asked, when), and
// once it answered "executed" an operator's "failed" is refused with
// CONTRADICTS_EVIDENCE and nothing changes — as is a "succeeded" naming
// another handle; a "succeeded" without a handle settles with the
// recorded one.
//
// threat:operator-contradicts-lookup
func TestLookupBindsOperator(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		rec, eff := e.unknown(true)
		e.setNow(base.Add(time.Minute))
		res, err := e.set.LookupByOperator(e.ctx, e.store, rec.OperationID, "", "alice")
		if err != nil || len(res) != 1 || res[0].Answer.Kind != effect.Executed {
			t.Fatalf("LookupByOperator: %+v, %v; want one executed answer", res, err)
		}
		handle := res[0].Answer.Handle
		got, err := e.store.Lookups(e.ctx, rec.OperationID)
		if err != nil || len(got) != 1 {
			t.Fatalf("Lookups: %+v, %v; want the one lookup", got, err)
		}
		l := got[0]
		if l.Effect != payments.EffectTransfer || l.DownstreamKey != eff.DownstreamKey || l.Answer != registry.LookupExecuted ||
			l.Handle != handle || handle == "" || l.Actor != "alice" || !l.At.Equal(base.Add(time.Minute)) || l.Detail == "" {
			t.Errorf("recorded lookup %+v; want transfer/%s executed %s by alice at %v", l, eff.DownstreamKey, handle, base.Add(time.Minute))
		}

		_, err = e.reconcile(rec.OperationID, "failed", "", "INC-7: I believe it failed", "alice")
		if effect.OperatorCode(err) != effect.CodeContradictsEvidence {
			t.Fatalf("failed after an executed lookup: %v; want %s", err, effect.CodeContradictsEvidence)
		}
		_, err = e.reconcile(rec.OperationID, "succeeded", "tr_999", "INC-7: provider shows tr_999", "bob")
		if effect.OperatorCode(err) != effect.CodeContradictsEvidence {
			t.Fatalf("succeeded with another handle: %v; want %s", err, effect.CodeContradictsEvidence)
		}
		e.unchanged(rec.OperationID)
		if _, err := e.store.PendingSettlement(e.ctx, rec.OperationID); err == nil {
			t.Error("a refused decision left a pending settlement")
		}

		st, err := e.reconcile(rec.OperationID, "succeeded", "", "INC-7: lookup shows it executed", "bob")
		if err != nil || st.Record.State != idem.StateSucceeded {
			t.Fatalf("succeeded: %+v, %v; want SUCCEEDED", st, err)
		}
		effs, _ := e.store.Effects(e.ctx, rec.OperationID)
		if len(effs) != 1 || effs[0].Handle != handle {
			t.Errorf("settled effect %+v; want the recorded handle %s", effs, handle)
		}
	})
}

// TestFailedTakesTwoOperators: "failed" with no recorded definite answer
// (the lookup found nothing) is stored as a pending request, the record
// unchanged; its requester cannot approve it, a conflicting request is
// refused, and a second operator's approval settles it FAILED_FINAL —
// each step in the audit log.
//
// threat:one-operator-failed
func TestFailedTakesTwoOperators(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		rec, _ := e.unknown(false)
		if res, err := e.set.LookupByOperator(e.ctx, e.store, rec.OperationID, payments.EffectTransfer, "alice"); err != nil ||
			res[0].Answer.Kind != effect.NotFound {
			t.Fatalf("LookupByOperator: %+v, %v; want not found", res, err)
		}
		st, err := e.reconcile(rec.OperationID, "failed", "", "OPS-12: provider support found no transfer", "alice")
		if err != nil || st.Pending == nil || st.Settled || st.Pending.RequestedBy != "alice" || st.Pending.Outcome != registry.EffectFailed {
			t.Fatalf("failed without a definite answer: %+v, %v; want a pending request by alice", st, err)
		}
		e.unchanged(rec.OperationID)
		if _, err := e.set.ApproveByOperator(e.ctx, e.store, rec.OperationID, "alice"); effect.OperatorCode(err) != effect.CodeSelfApproval {
			t.Fatalf("approval by the requester: %v; want %s", err, effect.CodeSelfApproval)
		}
		if _, err := e.reconcile(rec.OperationID, "failed", "", "OPS-13: my own reading", "bob"); effect.OperatorCode(err) != effect.CodeApprovalPending {
			t.Fatalf("a second request: %v; want %s", err, effect.CodeApprovalPending)
		}
		e.unchanged(rec.OperationID)

		st, err = e.set.ApproveByOperator(e.ctx, e.store, rec.OperationID, "bob")
		if err != nil || st.Record.State != idem.StateFailedFinal {
			t.Fatalf("approval by bob: %+v, %v; want FAILED_FINAL", st, err)
		}
		log, err := e.store.Reconciliations(e.ctx, rec.OperationID)
		if err != nil || len(log) != 1 || log[0].Actor != "alice, approved by bob" || !strings.Contains(log[0].Evidence, "OPS-12") {
			t.Errorf("reconciliation log %+v, %v; want one entry by alice, approved by bob", log, err)
		}
		p, err := e.store.PendingSettlement(e.ctx, rec.OperationID)
		if err != nil || p.ApprovedBy != "bob" {
			t.Errorf("pending settlement %+v, %v; want approved by bob", p, err)
		}
		want := []string{"alice lookup", "alice lookup", "alice reconcile", "alice reconcile.pending", "alice reconcile.approve", "alice failed",
			"bob reconcile", "bob failed", "bob reconcile.approve"}
		if got := e.actions(rec.OperationID); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("audit log %q, want %q", got, want)
		}
	})
}

// TestFailedOnDeclinedLookup: after a recorded "declined" one operator
// settles "failed" at once, and "succeeded" is refused.
//
// threat:operator-contradicts-lookup
func TestFailedOnDeclinedLookup(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		if err := e.prov.SetMode(provider.ModeDecline); err != nil {
			t.Fatal(err)
		}
		rec, _ := e.unknown(true)
		if res, err := e.set.LookupByOperator(e.ctx, e.store, rec.OperationID, "", "carol"); err != nil || res[0].Answer.Kind != effect.Declined {
			t.Fatalf("LookupByOperator: %+v, %v; want declined", res, err)
		}
		if _, err := e.reconcile(rec.OperationID, "succeeded", "", "INC-8: the customer says it arrived", "carol"); effect.OperatorCode(err) != effect.CodeContradictsEvidence {
			t.Fatalf("succeeded after a declined lookup: %v; want %s", err, effect.CodeContradictsEvidence)
		}
		e.unchanged(rec.OperationID)
		st, err := e.reconcile(rec.OperationID, "failed", "", "INC-8: provider declined the key", "carol")
		if err != nil || st.Pending != nil || st.Record.State != idem.StateFailedFinal {
			t.Fatalf("failed after a declined lookup: %+v, %v; want FAILED_FINAL at once", st, err)
		}
	})
}

// TestApprovalsSettleOnce: concurrent approvals by different operators
// settle the operation once; every other approval is refused.
//
// threat:one-operator-failed
func TestApprovalsSettleOnce(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		rec, _ := e.unknown(false)
		if st, err := e.reconcile(rec.OperationID, "failed", "", "OPS-12: provider support found no transfer", "alice"); err != nil || st.Pending == nil {
			t.Fatalf("request: %+v, %v", st, err)
		}
		const n = 8
		var (
			wg      sync.WaitGroup
			settled atomic.Int32
		)
		for i := range n {
			wg.Go(func() {
				st, err := e.set.ApproveByOperator(e.ctx, e.store, rec.OperationID, fmt.Sprintf("op%d", i))
				switch code := effect.OperatorCode(err); {
				case err == nil && st.Method == registry.ReconcileOperator:
					settled.Add(1)
				case code == effect.CodeAlreadyApproved || code == effect.CodeNotUnknown:
				default:
					t.Errorf("approval %d: %+v, %v", i, st, err)
				}
			})
		}
		wg.Wait()
		if settled.Load() != 1 {
			t.Errorf("%d approvals settled, want exactly 1", settled.Load())
		}
		log, err := e.store.Reconciliations(e.ctx, rec.OperationID)
		p, perr := e.store.PendingSettlement(e.ctx, rec.OperationID)
		if err != nil || perr != nil || len(log) != 1 || log[0].Actor != "alice, approved by "+p.ApprovedBy {
			t.Errorf("reconciliations %+v, %v, request %+v, %v; want 1, by alice and the one approver stored", log, err, p, perr)
		}
	})
}
