package registrytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// unstorable lists responses that break the storage rules: a status that
// is not a 2xx or 4xx, a body over idem.MaxStoredBody.
func unstorable() map[string]idem.Response {
	ok := outcome("rules", 0).Response
	with := func(status, size int) idem.Response {
		r := ok
		r.Status = status
		if size >= 0 {
			r.Body = bytes.Repeat([]byte("x"), size)
		}
		return r
	}
	return map[string]idem.Response{
		"status 503":       with(503, -1),
		"status 500":       with(500, -1),
		"status 302":       with(302, -1),
		"status 199":       with(199, -1),
		"status 0":         with(0, -1),
		"body of 65 KiB":   with(201, 65<<10),
		"body cap + 1":     with(201, idem.MaxStoredBody+1),
		"body of 200 KiB":  with(201, 200<<10),
		"4xx, 65 KiB body": with(422, 65<<10),
		"status 399":       with(399, -1),
	}
}

// testResponseRulesEnforced: no path that stores a response — Complete,
// ClaimAndExecute, ExecuteOnce, Reconcile — stores one that breaks the
// storage rules: each refuses it with an error that is
// idem.ErrResponseRefused (and idem.ErrResponseTooLarge for a body over the
// cap), and nothing of the outcome is written: no business row, no outbox
// row, the record as it was. The bounds themselves (200, 499, a body of
// exactly the cap) are stored. threat:unstorable-response
func testResponseRulesEnforced(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	check := func(path, name string, resp idem.Response, err error) {
		t.Helper()
		switch {
		case !errors.Is(err, idem.ErrResponseRefused):
			t.Errorf("%s with %s: %v, want idem.ErrResponseRefused", path, name, err)
		case errors.Is(err, idem.ErrResponseTooLarge) != (len(resp.Body) > idem.MaxStoredBody):
			t.Errorf("%s with %s: %v: ErrResponseTooLarge %v, want %v", path, name, err,
				errors.Is(err, idem.ErrResponseTooLarge), len(resp.Body) > idem.MaxStoredBody)
		}
		var rule *idem.ResponseRuleError
		if errors.As(err, &rule) && (rule.Status != resp.Status || rule.BodySize != len(resp.Body)) {
			t.Errorf("%s with %s: the error names status %d and %d bytes", path, name, rule.Status, rule.BodySize)
		}
	}
	for name, resp := range unstorable() {
		out := outcome("rules", 1)
		out.Response = resp
		if resp.Status >= 400 && resp.Status <= 499 {
			out.State = idem.StateFailedFinal
		}

		c := e.claim("conformance.rules")
		rec := e.reserve(c)
		_, err := e.h.Store.Complete(e.ctx, rec, effect("rules", out))
		check("Complete", name, resp, err)
		if st, _ := e.state(c.Scope); st != idem.StateReserved {
			t.Errorf("Complete with %s: the record is %s, want RESERVED", name, st)
		}
		if n := e.effects(rec.OperationID) + e.outbox(rec.OperationID); n != 0 {
			t.Errorf("Complete with %s left %d business and outbox rows", name, n)
		}

		c = e.claim("conformance.rules")
		var id string
		_, err = e.h.ClaimAndExecute(e.ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			id = rec.OperationID
			return effect("rules", out)(ctx, tx, rec)
		})
		check("ClaimAndExecute", name, resp, err)
		e.nothingStored("ClaimAndExecute with "+name, c, id)

		c = e.claim("conformance.rules")
		_, err = e.h.Store.ExecuteOnce(e.ctx, c, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
			id = rec.OperationID
			return effect("rules", out)(ctx, tx, rec)
		})
		check("ExecuteOnce", name, resp, err)
		e.nothingStored("ExecuteOnce with "+name, c, id)

		c = e.claim("conformance.rules")
		u := e.unknown(c)
		r := reconciliation("rules")
		r.Response = resp
		_, err = e.h.Store.Reconcile(e.ctx, u.OperationID, r)
		check("Reconcile", name, resp, err)
		if st, _ := e.state(c.Scope); st != idem.StateUnknown {
			t.Errorf("Reconcile with %s: the record is %s, want UNKNOWN", name, st)
		}
		if log, err := e.h.Store.Reconciliations(e.ctx, u.OperationID); err != nil || len(log) != 0 {
			t.Errorf("Reconcile with %s: log %v, %v; want none", name, log, err)
		}
	}

	for _, resp := range []idem.Response{
		{Status: 200, MediaType: "text/plain", Body: []byte("200")},
		{Status: 499, MediaType: "text/plain", Body: bytes.Repeat([]byte("y"), idem.MaxStoredBody)},
	} {
		out := registry.Outcome{State: idem.StateSucceeded, Response: resp}
		if resp.Status >= 400 {
			out.State = idem.StateFailedFinal
		}
		c := e.claim("conformance.rules")
		done := e.complete(e.reserve(c), out)
		if got, err := e.h.Store.Get(e.ctx, c.Scope); err != nil || !sameResponse(got.Response, resp) || done.State != out.State {
			t.Errorf("Complete with status %d, %d bytes: %v, not stored as given", resp.Status, len(resp.Body), err)
		}
	}

	// A Sealer that adds more than registry.MaxSealOverhead cannot make a
	// body at the cap too long for its column.
	sealed := e.h.Sealed(t, padSealer{pad: registry.MaxSealOverhead + 1})
	out := outcome("rules-sealed", 1)
	out.Response.Body = bytes.Repeat([]byte("z"), idem.MaxStoredBody)
	c := e.claim("conformance.rules")
	rec, _, err := sealed.Reserve(e.ctx, c)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := sealed.Complete(e.ctx, rec, effect("rules", out)); !errors.Is(err, idem.ErrResponseRefused) {
		t.Errorf("Complete sealing past the column's bound: %v, want idem.ErrResponseRefused", err)
	}
	if n := e.effects(rec.OperationID) + e.outbox(rec.OperationID); n != 0 {
		t.Errorf("the refused sealed Complete left %d business and outbox rows", n)
	}
}

// nothingStored fails the test unless c's scope has no record and the
// operation id (if the business function ran) no business or outbox row.
func (e *env) nothingStored(what string, c registry.Claim, id string) {
	e.t.Helper()
	if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		e.t.Errorf("%s: Get: %v, want no record", what, err)
	}
	if id != "" {
		if n := e.effects(id) + e.outbox(id); n != 0 {
			e.t.Errorf("%s left %d business and outbox rows", what, n)
		}
	}
}

// padSealer "seals" by appending pad bytes: a Sealer with too much
// overhead. It never opens anything.
type padSealer struct{ pad int }

func (p padSealer) ActiveKeyID() string { return "pad" }

func (p padSealer) Seal(plaintext, _ []byte) (string, []byte, error) {
	return "pad", append(append([]byte(nil), plaintext...), make([]byte, p.pad)...), nil
}

func (p padSealer) Open(string, []byte, []byte) ([]byte, error) {
	return nil, errors.New("padSealer opens nothing")
}

// storeTerminal writes, behind the store's back, a terminal state with the
// response resp (and resp_key key, NULL when empty) on the record at
// scope: the Go checks bypassed.
const storeTerminal = `UPDATE idem_operations SET state = 'SUCCEEDED', resp_status = $1, resp_media_type = 'text/plain',
	resp_location = '', resp_etag = '', resp_body = $2, resp_digest = $3, resp_key = $4 WHERE scope = $5`

// testResponseRulesInDatabase: with the Go checks bypassed (SQL through
// the harness), the database itself refuses a stored status that is not a
// 2xx or 4xx and a body over the cap — over the cap plus
// registry.MaxSealOverhead for a sealed body (resp_key set) — on update
// and on insert; the bounds pass. threat:unstorable-response
func testResponseRulesInDatabase(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	digest := bytes.Repeat([]byte{1}, 32)
	template := e.reserve(e.claim("conformance.rules"))
	for _, tc := range []struct {
		status int
		size   int
		key    any
		ok     bool
	}{
		{200, 10, nil, true},
		{499, idem.MaxStoredBody, nil, true},
		{201, idem.MaxStoredBody + registry.MaxSealOverhead, "k1", true},
		{503, 10, nil, false},
		{500, 10, nil, false},
		{302, 10, nil, false},
		{199, 10, nil, false},
		{300, 10, nil, false},
		{299, 10, nil, true},
		{400, 10, nil, true},
		{201, idem.MaxStoredBody + 1, nil, false},
		{201, 200 << 10, nil, false},
		{201, idem.MaxStoredBody + registry.MaxSealOverhead + 1, "k1", false},
	} {
		name := fmt.Sprintf("status %d, %d bytes, key %v", tc.status, tc.size, tc.key)
		c := e.claim("conformance.rules")
		e.reserve(c)
		body := bytes.Repeat([]byte("b"), tc.size)
		err := e.h.Exec(e.ctx, storeTerminal, tc.status, body, digest, tc.key, c.Scope[:])
		if (err == nil) != tc.ok {
			t.Errorf("UPDATE to %s: error %v, want accepted %v", name, err, tc.ok)
		}
		want := int64(0)
		if tc.ok {
			want = 1
		}
		if n := e.count(`SELECT count(*) FROM idem_operations WHERE scope = $1 AND state = 'SUCCEEDED'`, c.Scope[:]); n != want {
			t.Errorf("after the UPDATE to %s: %d SUCCEEDED records, want %d", name, n, want)
		}

		// The same response in a record inserted whole (its times copied
		// from a reservation, so the statement is portable).
		scope := e.bytes32()
		id := idem.NewOperationID(base, idem.ScopeHash(scope))
		err = e.h.Exec(e.ctx, `INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
			state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
			resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key)
			SELECT $1, $2, operation, owner, fingerprint, contract, 'SUCCEEDED', 1, writer_epoch,
			       lease_until, expires_at, created_at, updated_at, $3, 'text/plain', '', '', $4, $5, $6
			FROM idem_operations WHERE operation_id = $7`,
			scope[:], id, tc.status, body, digest, tc.key, template.OperationID)
		if (err == nil) != tc.ok {
			t.Errorf("INSERT of %s: error %v, want accepted %v", name, err, tc.ok)
		}
		if n := e.count(`SELECT count(*) FROM idem_operations WHERE operation_id = $1`, id); n != want {
			t.Errorf("after the INSERT of %s: %d records, want %d", name, n, want)
		}
	}
}

// evidenceTables are the tables that hold what happened: records, their
// outbox messages, effect attempts, reconciliations and prune runs.
var evidenceTables = []string{"idem_operations", "idem_outbox", "idem_effects", "idem_reconciliations", "idem_prune_runs"}

// testEvidenceNotWiped: TRUNCATE and a DELETE of every row are refused on
// every table that holds evidence, and so is deleting a published outbox
// message, an effect attempt or a reconciliation of a record that is not
// an expiring tombstone; every row stays. (SQLite has no TRUNCATE: there
// the statement fails as a syntax error, and DELETE is the whole-table
// statement its triggers refuse.) The deletions the owning paths do —
// Release, Prune of tombstones with their published messages, effects and
// reconciliations, RecordPruneRun's trimming — still work:
// TombstoneTTLDeletion, ReserveReleaseChurn and PruneRuns.
// threat:evidence-wiped
func testEvidenceNotWiped(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	rec := e.reserve(e.claim("conformance.evidence"))
	if _, err := e.h.Store.BeginEffect(e.ctx, rec, "transfer", nil); err != nil {
		t.Fatalf("BeginEffect: %v", err)
	}
	rec.State = idem.StateExecuting
	done := e.complete(rec, outcome("evidence", 2))
	published := registry.MessageID(done.OperationID, 0)
	if err := e.h.Store.MarkPublished(e.ctx, []string{published}); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	u := e.unknown(e.claim("conformance.evidence"))
	if _, err := e.h.Store.Reconcile(e.ctx, u.OperationID, reconciliation("evidence")); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if err := e.h.Store.RecordPruneRun(e.ctx, registry.PruneRun{Actor: "conformance", StartedAt: base, FinishedAt: base}); err != nil {
		t.Fatalf("RecordPruneRun: %v", err)
	}
	before := map[string]int64{}
	for _, tbl := range evidenceTables {
		if before[tbl] = e.count(`SELECT count(*) FROM ` + tbl); before[tbl] == 0 {
			t.Fatalf("%s is empty: the case probes nothing", tbl)
		}
	}
	for _, tbl := range evidenceTables {
		for _, stmt := range []string{`TRUNCATE ` + tbl, `DELETE FROM ` + tbl} {
			if err := e.h.Exec(e.ctx, stmt); err == nil {
				t.Errorf("%s succeeded", stmt)
			}
		}
	}
	for _, d := range []struct{ what, sql, arg string }{
		{"a published outbox message of a live record", `DELETE FROM idem_outbox WHERE message_id = $1`, published},
		{"an effect attempt of a live record", `DELETE FROM idem_effects WHERE operation_id = $1`, done.OperationID},
		{"a reconciliation of a live record", `DELETE FROM idem_reconciliations WHERE operation_id = $1`, u.OperationID},
		{"a settled record", `DELETE FROM idem_operations WHERE operation_id = $1`, done.OperationID},
	} {
		if n := e.count(strings.Replace(d.sql, "DELETE", "SELECT count(*)", 1), d.arg); n != 1 {
			t.Fatalf("%d rows match the deletion of %s, want 1", n, d.what)
		}
		if err := e.h.Exec(e.ctx, d.sql, d.arg); err == nil {
			t.Errorf("deleting %s succeeded", d.what)
		}
	}
	for _, tbl := range evidenceTables {
		if n := e.count(`SELECT count(*) FROM ` + tbl); n != before[tbl] {
			t.Errorf("%s: %d rows after the refused statements, want %d", tbl, n, before[tbl])
		}
	}
}
