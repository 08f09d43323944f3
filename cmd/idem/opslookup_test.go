package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/example/provider"
	"github.com/idemkit/idem/registry"
)

// sendToProvider sends the stored request of rec's transfer attempt to
// the provider at url with its downstream key, as the crashed owner did.
func (s *opsStore) sendToProvider(url string, rec registry.Record) {
	s.t.Helper()
	effs, err := s.Effects(s.t.Context(), rec.OperationID)
	if err != nil || len(effs) != 1 {
		s.t.Fatalf("effects: %+v, %v", effs, err)
	}
	(&payments.ProviderClient{BaseURL: url}).Send(s.t.Context(), effs[0].DownstreamKey, effs[0].Request)
}

// unchanged fails unless id is still UNKNOWN with no reconciliation and
// no settlement request.
func (s *opsStore) unchanged(id string) {
	s.t.Helper()
	rec, err := s.GetByID(s.t.Context(), id)
	if err != nil || rec.State != idem.StateUnknown {
		s.t.Fatalf("%s is %s (%v), want UNKNOWN", id, rec.State, err)
	}
	if log, _ := s.Reconciliations(s.t.Context(), id); len(log) != 0 {
		s.t.Fatalf("reconciliations %+v, want none", log)
	}
	if p, err := s.PendingSettlement(s.t.Context(), id); err == nil {
		s.t.Fatalf("a settlement request was stored: %+v", p)
	}
}

// TestOpsLookupBindsOperator: "idem ops lookup" asks the real provider,
// prints and records its answer "executed" (and ops show lists it); then
// "idem ops reconcile --outcome failed" is refused (exit 1,
// CONTRADICTS_EVIDENCE) and nothing changes, and one-line evidence is
// refused (exit 2, EVIDENCE_TOO_WEAK).
//
// threat:operator-contradicts-lookup threat:weak-evidence
func TestOpsLookupBindsOperator(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(provider.New().Handler())
	t.Cleanup(srv.Close)
	registries(t, func(t *testing.T, dsn string) {
		s := openOpsStore(t, dsn)
		_, u := s.operation(idem.StateUnknown)
		s.sendToProvider(srv.URL, u)
		code, out, stderr := runCmd(t, "", "ops", "lookup", u.OperationID, "--provider", srv.URL, "--actor", "alice", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "transfer key idem-") || !strings.Contains(out, ": executed, handle tr_") || !strings.Contains(out, "asked by alice") {
			t.Fatalf("ops lookup: code %d, out %q, stderr %q", code, out, stderr)
		}
		shown := opsJSON[evidenceJSON](t, "ops", "show", u.OperationID, "--db", dsn)
		if len(shown.Lookups) != 1 || shown.Lookups[0].Answer != registry.LookupExecuted || shown.Lookups[0].Actor != "alice" ||
			!strings.HasPrefix(shown.Lookups[0].Handle, "tr_") {
			t.Errorf("ops show --json lookups: %+v", shown.Lookups)
		}

		code, _, stderr = runCmd(t, "", "ops", "reconcile", u.OperationID, "--outcome", "failed", "--evidence", "I believe it failed", "--actor", "alice", "--db", dsn)
		if code != exitUsage || !strings.Contains(stderr, "EVIDENCE_TOO_WEAK") {
			t.Errorf("evidence naming nothing: code %d, stderr %q; want 2 EVIDENCE_TOO_WEAK", code, stderr)
		}
		code, out, stderr = runCmd(t, "", "ops", "reconcile", u.OperationID, "--outcome", "failed", "--evidence", "INC-7: I believe it failed", "--actor", "alice", "--db", dsn)
		if code != exitRefused || !strings.Contains(stderr, "CONTRADICTS_EVIDENCE") || out != "" {
			t.Fatalf("failed after an executed lookup: code %d, out %q, stderr %q; want 1 CONTRADICTS_EVIDENCE", code, out, stderr)
		}
		s.unchanged(u.OperationID)
	})
}

// TestOpsFailedNeedsApproval: with no definite answer recorded (the
// provider never saw the key), "reconcile --outcome failed" only stores a
// request; its requester cannot approve it (exit 1, SELF_APPROVAL); "idem
// ops approve" by a second operator settles it FAILED_FINAL.
//
// threat:one-operator-failed
func TestOpsFailedNeedsApproval(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(provider.New().Handler())
	t.Cleanup(srv.Close)
	registries(t, func(t *testing.T, dsn string) {
		s := openOpsStore(t, dsn)
		_, u := s.operation(idem.StateUnknown)
		if code, out, stderr := runCmd(t, "", "ops", "lookup", u.OperationID, "--provider", srv.URL, "--actor", "alice", "--db", dsn); code != exitOK ||
			!strings.Contains(out, ": not found") {
			t.Fatalf("ops lookup: code %d, out %q, stderr %q", code, out, stderr)
		}
		code, out, stderr := runCmd(t, "", "ops", "reconcile", u.OperationID, "--outcome", "failed", "--evidence", "OPS-12: provider support found no transfer", "--actor", "alice", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "waits for a second operator") || !strings.Contains(out, "idem ops approve "+u.OperationID) {
			t.Fatalf("ops reconcile --outcome failed: code %d, out %q, stderr %q", code, out, stderr)
		}
		if rec, _ := s.GetByID(t.Context(), u.OperationID); rec.State != idem.StateUnknown {
			t.Fatalf("the request settled the operation: %s", rec.State)
		}
		if code, _, stderr := runCmd(t, "", "ops", "approve", u.OperationID, "--actor", "alice", "--db", dsn); code != exitRefused || !strings.Contains(stderr, "SELF_APPROVAL") {
			t.Errorf("approval by the requester: code %d, stderr %q", code, stderr)
		}
		// The requester under another spelling of the name, or under
		// a login name the default would have taken: refused too.
		if code, _, stderr := runCmd(t, "", "ops", "approve", u.OperationID, "--actor", " Alice", "--db", dsn); code != exitRefused || !strings.Contains(stderr, "SELF_APPROVAL") {
			t.Errorf("approval by the requester as ' Alice': code %d, stderr %q", code, stderr)
		}
		if code, _, stderr := runCmd(t, "", "ops", "approve", u.OperationID, "--db", dsn); code != exitUsage || !strings.Contains(stderr, "--actor is required") {
			t.Errorf("approval without --actor: code %d, stderr %q", code, stderr)
		}
		code, out, stderr = runCmd(t, "", "ops", "approve", u.OperationID, "--actor", "bob", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "UNKNOWN -> FAILED_FINAL") {
			t.Fatalf("ops approve by bob: code %d, out %q, stderr %q", code, out, stderr)
		}
		if log, err := s.Reconciliations(t.Context(), u.OperationID); err != nil || len(log) != 1 || log[0].Actor != "alice, approved by bob" {
			t.Errorf("reconciliation log %+v, %v", log, err)
		}
		if code, out, _ := runCmd(t, "", "ops", "show", u.OperationID, "--db", dsn); code != exitOK || !strings.Contains(out, "lookups (1):") ||
			!strings.Contains(out, "approved by bob") {
			t.Errorf("ops show: code %d, out %q", code, out)
		}
	})
}
