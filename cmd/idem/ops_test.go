package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// opsStore is a store on the CLI's database, with a clock the test sets,
// to build the operations the CLI then lists, shows and reconciles.
type opsStore struct {
	registry.Store
	t   *testing.T
	now atomic.Pointer[time.Time]
}

func openOpsStore(t *testing.T, dsn string) *opsStore {
	t.Helper()
	s := &opsStore{t: t}
	st, err := idemstore.Open(t.Context(), dsn, idemstore.Options{Now: func() time.Time {
		if p := s.now.Load(); p != nil {
			return *p
		}
		return time.Time{}
	}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(st.Close)
	s.Store = st
	return s
}

// at makes the store's clock read t (the zero time: database time).
func (s *opsStore) at(t time.Time) { s.now.Store(&t) }

// operation creates an operation in state st (RESERVED, SUCCEEDED or
// UNKNOWN, the latter with a "transfer" attempt whose handle is recorded)
// and returns its claim and record.
func (s *opsStore) operation(st idem.State) (registry.Claim, registry.Record) {
	s.t.Helper()
	ctx := s.t.Context()
	c := registry.Claim{Operation: payments.OperationTransfer}
	rand.Read(c.Scope[:])
	rand.Read(c.Fingerprint[:])
	rand.Read(c.Owner[:])
	rec, _, err := s.Reserve(ctx, c)
	if err != nil {
		s.t.Fatal(err)
	}
	switch st {
	case idem.StateSucceeded:
		resp := idem.Response{Status: 201, MediaType: "application/json", Location: "/v1/transfers/1", Body: []byte(`{"id":1}`)}
		rec, err = s.Complete(ctx, rec, func(context.Context, registry.Tx, registry.Record) (registry.Outcome, error) {
			return registry.Outcome{State: idem.StateSucceeded, Response: resp}, nil
		})
	case idem.StateUnknown:
		req := []byte(`{"amount":"12.50","currency":"EUR","payee":"acct_1","reference":"` + rec.OperationID + `"}`)
		if _, err = s.BeginEffect(ctx, rec, payments.EffectTransfer, req); err == nil {
			if rec, err = s.MarkUnknown(ctx, rec); err == nil {
				err = s.RecordEffect(ctx, rec, payments.EffectTransfer, "tr_7", "", nil)
			}
		}
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return c, rec
}

// opsJSON runs an ops command with --json and decodes its one line.
func opsJSON[T any](t *testing.T, args ...string) T {
	t.Helper()
	code, out, stderr := runCmd(t, "", append(args, "--json")...)
	var v T
	if code != exitOK || strings.Count(out, "\n") != 1 {
		t.Fatalf("%q: code %d, out %q, stderr %q", args, code, out, stderr)
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%q: %v in %q", args, err, out)
	}
	return v
}

type listOut struct {
	Operations []operationJSON `json:"operations"`
}

func listIDs(l listOut) (ids []string) {
	for _, o := range l.Operations {
		ids = append(ids, o.OperationID)
	}
	return ids
}

// Proves threat:settled-on-a-guess (docs/threat-model.md).
func TestOps(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		s := openOpsStore(t, dsn)
		now := time.Now().UTC().Truncate(time.Second)
		s.at(now.Add(-2 * time.Hour))
		c1, u1 := s.operation(idem.StateUnknown)
		s.at(now.Add(-time.Hour))
		_, s1 := s.operation(idem.StateSucceeded)
		s.at(now.Add(-5 * time.Minute))
		_, u2 := s.operation(idem.StateUnknown)
		s.at(time.Time{})
		_, r1 := s.operation(idem.StateReserved)

		all := opsJSON[listOut](t, "ops", "list", "--db", dsn)
		if got, want := strings.Join(listIDs(all), " "), strings.Join([]string{u1.OperationID, s1.OperationID, u2.OperationID, r1.OperationID}, " "); got != want {
			t.Errorf("ops list: %s, want %s", got, want)
		}
		stuck := opsJSON[listOut](t, "ops", "list", "--state", "unknown", "--older-than", "15m", "--db", dsn)
		if len(stuck.Operations) != 1 || stuck.Operations[0].OperationID != u1.OperationID ||
			stuck.Operations[0].State != idem.StateUnknown || !stuck.Operations[0].CreatedAt.Equal(now.Add(-2*time.Hour)) {
			t.Errorf("ops list --state unknown --older-than 15m: %+v, want %s only", stuck, u1.OperationID)
		}
		code, out, stderr := runCmd(t, "", "ops", "--db", dsn, "list", "--state", "UNKNOWN")
		if code != exitOK || !strings.HasPrefix(out, "OPERATION ID") || !strings.Contains(out, u1.OperationID) ||
			!strings.Contains(out, u2.OperationID) || strings.Contains(out, s1.OperationID) || stderr != "" {
			t.Errorf("ops list --state UNKNOWN: code %d, out %q, stderr %q", code, out, stderr)
		}
		code, out, stderr = runCmd(t, "", "ops", "list", "--limit", "1", "--db", dsn)
		if code != exitOK || strings.Count(out, "\n") != 2 || !strings.Contains(stderr, "raise --limit") {
			t.Errorf("ops list --limit 1: code %d, out %q, stderr %q", code, out, stderr)
		}
		if code, out, _ = runCmd(t, "", "ops", "list", "--state", "failed_final", "--db", dsn); code != exitOK || out != "no operations\n" {
			t.Errorf("ops list of no operations: code %d, out %q", code, out)
		}

		shown := opsJSON[showJSON](t, "ops", "show", u1.OperationID, "--db", dsn)
		key := registry.DownstreamKey(u1.OperationID, payments.EffectTransfer)
		if shown.Operation.State != idem.StateUnknown || shown.Operation.Response != nil || len(shown.Effects) != 1 ||
			shown.Effects[0].DownstreamKey != key || shown.Effects[0].Handle != "tr_7" || len(shown.Reconciliations) != 0 {
			t.Errorf("ops show of an UNKNOWN operation: %+v", shown)
		}
		code, out, _ = runCmd(t, "", "ops", "show", "--db", dsn, u1.OperationID)
		if code != exitOK || !strings.Contains(out, "UNKNOWN") || !strings.Contains(out, key) || !strings.Contains(out, "reconciliations (0)") {
			t.Errorf("ops show: code %d, out %q", code, out)
		}

		// An operator reconciles u1 as succeeded: the retry replays the
		// transfer's own 201, rendered from the stored request and the
		// recorded handle, and the decision is logged.
		code, out, stderr = runCmd(t, "", "ops", "reconcile", u1.OperationID, "--outcome", "succeeded",
			"--evidence", "provider: GET /transfers/"+key+" -> 201 tr_7", "--actor", "alice", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "reconciled: UNKNOWN -> SUCCEEDED") || !strings.Contains(out, "201 application/json") {
			t.Fatalf("ops reconcile: code %d, out %q, stderr %q", code, out, stderr)
		}
		replay, created, err := s.Reserve(t.Context(), c1)
		var tr payments.Transfer
		if err != nil || created || registry.Decide(replay, false, c1.Fingerprint) != registry.Replay ||
			replay.Response.Status != 201 || replay.Response.MediaType != "application/json" ||
			replay.Response.Location != "/v1/transfers/"+payments.TransferID(u1.OperationID) ||
			json.Unmarshal(replay.Response.Body, &tr) != nil || tr.ProviderTransfer != "tr_7" || tr.Amount != "12.50" || tr.Payee != "acct_1" {
			t.Errorf("retry after the reconciliation: %+v %v %v, want a replay of the transfer's 201", replay, created, err)
		}
		log, err := s.Reconciliations(t.Context(), u1.OperationID)
		if err != nil || len(log) != 1 || log[0].Actor != "alice" || log[0].Method != registry.ReconcileOperator ||
			log[0].Outcome != idem.StateSucceeded || !strings.Contains(log[0].Evidence, "tr_7") {
			t.Errorf("reconciliation log: %+v, %v", log, err)
		}
		code, _, stderr = runCmd(t, "", "ops", "reconcile", u1.OperationID, "--outcome", "failed", "--evidence", "again, see INC-2", "--db", dsn)
		if code != exitRefused || !strings.Contains(stderr, "is SUCCEEDED, not UNKNOWN") {
			t.Errorf("second reconcile: code %d, stderr %q", code, stderr)
		}
		for _, id := range []string{s1.OperationID, r1.OperationID} {
			if code, _, stderr = runCmd(t, "", "ops", "reconcile", id, "--outcome", "failed", "--evidence", "INC-3: no transfer", "--db", dsn); code != exitRefused ||
				!strings.Contains(stderr, "not UNKNOWN") {
				t.Errorf("reconcile of a record that is not UNKNOWN: code %d, stderr %q", code, stderr)
			}
		}
		for _, args := range [][]string{
			{"ops", "show", "op_00000000000000000000000000", "--db", dsn},
			{"ops", "reconcile", "op_00000000000000000000000000", "--outcome", "failed", "--evidence", "INC-3: no transfer", "--db", dsn},
		} {
			if code, out, stderr = runCmd(t, "", args...); code != exitRefused || out != "" || !strings.Contains(stderr, "not found") {
				t.Errorf("%q: code %d, out %q, stderr %q", args, code, out, stderr)
			}
		}

		// "failed" with no recorded answer waits for a second operator.
		requested := opsJSON[evidenceJSON](t, "ops", "reconcile", u2.OperationID, "--outcome", "failed",
			"--evidence", "INC-7: provider has no transfer", "--actor", "bob", "--db", dsn)
		if requested.Operation.State != idem.StateUnknown || requested.Pending == nil || requested.Pending.RequestedBy != "bob" || requested.Pending.ApprovedBy != "" {
			t.Errorf("ops reconcile --outcome failed --json: %+v, want UNKNOWN with bob's request pending", requested)
		}
		failed := opsJSON[evidenceJSON](t, "ops", "approve", u2.OperationID, "--actor", "carol", "--db", dsn)
		if failed.Operation.State != idem.StateFailedFinal || failed.Operation.Response == nil || failed.Operation.Response.Status != 422 ||
			len(failed.Reconciliations) != 1 || failed.Reconciliations[0].Actor != "bob, approved by carol" || failed.Reconciliations[0].Method != "operator" ||
			failed.Pending == nil || failed.Pending.ApprovedBy != "carol" {
			t.Errorf("ops approve --json: %+v", failed)
		}
		if got := opsJSON[listOut](t, "ops", "list", "--state", "unknown", "--db", dsn); len(got.Operations) != 0 {
			t.Errorf("UNKNOWN operations left after reconciling both: %v", listIDs(got))
		}
	})
}

// TestOpsReconcileRace: operators reconciling one operation at once —
// exactly one succeeds.
// Proves threat:racing-settlements (docs/threat-model.md).
func TestOpsReconcileRace(t *testing.T) {
	t.Parallel()
	registries(t, func(t *testing.T, dsn string) {
		s := openOpsStore(t, dsn)
		_, u := s.operation(idem.StateUnknown)
		const operators = 4
		codes := make([]int, operators)
		var wg sync.WaitGroup
		for i := range operators {
			wg.Go(func() {
				var out, errb strings.Builder
				codes[i] = run(context.Background(), []string{"ops", "reconcile", u.OperationID, "--outcome", "succeeded",
					"--evidence", "seen tr_7 at the provider", "--actor", "op" + string(rune('a'+i)), "--db", dsn}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
			})
		}
		wg.Wait()
		ok := 0
		for _, c := range codes {
			if c == exitOK {
				ok++
			} else if c != exitRefused {
				t.Errorf("exit code %d", c)
			}
		}
		if log, err := s.Reconciliations(t.Context(), u.OperationID); ok != 1 || err != nil || len(log) != 1 {
			t.Errorf("%d reconciles succeeded (codes %v), log %+v (%v); want exactly one", ok, codes, log, err)
		}
	})
}

func TestOpsUsage(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "ops.db")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"ops"}, exitUsage},
		{[]string{"ops", "prune"}, exitUsage},
		{[]string{"ops", "list", "--state", "DONE", "--db", db}, exitUsage},
		{[]string{"ops", "list", "--older-than", "-1m", "--db", db}, exitUsage},
		{[]string{"ops", "list", "--older-than", "3d", "--db", db}, exitUsage},
		{[]string{"ops", "list", "--limit", "0", "--db", db}, exitUsage},
		{[]string{"ops", "list", "op_1", "--db", db}, exitUsage},
		{[]string{"ops", "show", "--db", db}, exitUsage},
		{[]string{"ops", "show", "op_1", "op_2", "--db", db}, exitUsage},
		{[]string{"ops", "reconcile", "op_1", "--evidence", "e", "--db", db}, exitUsage},
		{[]string{"ops", "reconcile", "op_1", "--outcome", "maybe", "--evidence", "e", "--db", db}, exitUsage},
		{[]string{"ops", "reconcile", "op_1", "--outcome", "succeeded", "--db", db}, exitUsage},
		{[]string{"ops", "reconcile", "op_1", "--outcome", "succeeded", "--evidence", " ", "--db", db}, exitUsage},
		{[]string{"ops", "reconcile", "op_1", "--outcome", "failed", "--evidence", "e", "--actor", "", "--db", db}, exitUsage},
		{[]string{"ops", "reconcile", "--outcome", "failed", "--evidence", "e", "--db", db}, exitUsage},
		{[]string{"ops", "reconcile", "op_1", "--outcome", "failed", "--evidence", "I believe it failed", "--db", db}, exitUsage},
		{[]string{"ops", "lookup", "op_1", "--db", db}, exitUsage},
		{[]string{"ops", "lookup", "--provider", "http://127.0.0.1:1", "--db", db}, exitUsage},
		{[]string{"ops", "approve", "--db", db}, exitUsage},
		{[]string{"ops", "list", "--db", "mysql://u:secret@h/db"}, exitRefused},
		{[]string{"ops", "show", "op_1", "--db", "mysql://u:secret@h/db"}, exitRefused},
	} {
		code, out, stderr := runCmd(t, "", c.args...)
		if code != c.code || out != "" || strings.Contains(stderr, "secret") || stderr == "" {
			t.Errorf("%q: code %d (want %d), out %q, stderr %q", c.args, code, c.code, out, stderr)
		}
	}
	for _, args := range [][]string{{"ops", "help"}, {"ops", "--help"}, {"ops", "-h"}, {"help", "ops"}} {
		code, out, stderr := runCmd(t, "", args...)
		if code != exitOK || !strings.Contains(out, "idem ops reconcile ID") || !strings.Contains(out, "make a dead letter pending again") || stderr != "" {
			t.Errorf("%q: code %d, out %q, stderr %q; want the actions on stdout", args, code, out, stderr)
		}
	}
}

// TestOpsReconcileDefaultActor: without --actor the actor is $USER, or
// "operator" when it is unset. Not parallel: it sets USER.
func TestOpsReconcileDefaultActor(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "actor.db")
	s := openOpsStore(t, dsn)
	for _, c := range []struct{ user, want string }{{"carol", "carol"}, {"", "operator"}} {
		t.Setenv("USER", c.user)
		_, u := s.operation(idem.StateUnknown)
		if code, _, stderr := runCmd(t, "", "ops", "reconcile", u.OperationID, "--outcome", "succeeded", "--evidence", "INC-5: provider shows tr_7", "--db", dsn); code != exitOK {
			t.Fatalf("reconcile: code %d, stderr %q", code, stderr)
		}
		if log, err := s.Reconciliations(t.Context(), u.OperationID); err != nil || len(log) != 1 || log[0].Actor != c.want {
			t.Errorf("USER=%q: log %+v (%v), want actor %q", c.user, log, err, c.want)
		}
	}
}
