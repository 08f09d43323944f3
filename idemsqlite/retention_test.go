package idemsqlite

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// TestMigration004Upgrade: a registry at migration 003 with records in it
// is rebuilt by 004 without losing a column of any record, and ends with
// the indexes of 001 and 002 and the triggers of 004.
func TestMigration004Upgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "upgrade.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migrateBefore(t, db, "004")
	reserved, done := newClaim("upgrade"), newClaim("upgrade")
	resp := idem.Response{Status: 201, MediaType: "application/json", Location: "/x/1", ETag: `"1"`, Body: []byte("{}\x00")}
	d := resp.Digest()
	const insert = `INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
		owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
		resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest)
		VALUES ($1, $2, 'upgrade', $3, $4, 'http.idempotency.v1', $5, 2, 3, 10, 20, 1, 5, $6, $7, $8, $9, $10, $11)`
	if _, err := db.ExecContext(ctx, insert, reserved.Scope[:], "op_reserved", reserved.Owner[:], reserved.Fingerprint[:],
		"RESERVED", nil, nil, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, insert, done.Scope[:], "op_done", done.Owner[:], done.Fingerprint[:],
		"SUCCEEDED", resp.Status, resp.MediaType, resp.Location, resp.ETag, resp.Body, d[:]); err != nil {
		t.Fatal(err)
	}

	s, err := OpenDB(ctx, db, Options{})
	if err != nil {
		t.Fatalf("OpenDB (migrating from 003): %v", err)
	}
	defer s.Close()
	for _, c := range []struct {
		claim registry.Claim
		id    string
		state idem.State
	}{{reserved, "op_reserved", idem.StateReserved}, {done, "op_done", idem.StateSucceeded}} {
		rec, err := s.Get(ctx, c.claim.Scope)
		switch {
		case err != nil:
			t.Fatalf("Get %s after the upgrade: %v", c.id, err)
		case rec.OperationID != c.id || rec.State != c.state || rec.Fingerprint != c.claim.Fingerprint ||
			rec.Owner != c.claim.Owner || rec.OwnerGen != 2 || rec.WriterEpoch != 3 || rec.Retired() ||
			rec.TombstoneTTL != 0 || rec.LeaseUntil.UnixMicro() != 10 || rec.ExpiresAt.UnixMicro() != 20 ||
			rec.CreatedAt.UnixMicro() != 1 || rec.UpdatedAt.UnixMicro() != 5:
			t.Errorf("%s after the upgrade: %+v", c.id, rec)
		case c.state.Terminal() && (rec.Response == nil || string(rec.Response.Body) != string(resp.Body) ||
			rec.Response.Location != resp.Location || rec.Response.ETag != resp.ETag):
			t.Errorf("%s after the upgrade: response %+v, want %+v", c.id, rec.Response, resp)
		}
	}
	var names []string
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE tbl_name IN ('idem_operations', 'idem_outbox')
		AND type IN ('index', 'trigger') AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	rows.Close()
	got := strings.Join(names, " ")
	for _, want := range []string{"idem_operations_lease", "idem_operations_expires", "idem_operations_inflight",
		"idem_operations_retire", "idem_operations_tombstones", "idem_outbox_operation", "idem_outbox_pending",
		"idem_operations_transition", "idem_operations_retire_abandoned_only", "idem_operations_terminal",
		"idem_operations_tombstone", "idem_operations_identity", "idem_operations_delete"} {
		if !strings.Contains(" "+got+" ", " "+want+" ") {
			t.Errorf("after the upgrade %s is missing (have %s)", want, got)
		}
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM idem_operations WHERE scope = $1`, done.Scope[:]); err == nil {
		t.Errorf("the upgraded table let a finished record be deleted")
	}
}

// TestPruneUsesPartialIndexes: SQLite uses a partial index only when the
// query repeats its WHERE terms; the prune statements must.
func TestPruneUsesPartialIndexes(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t)
	for q, index := range map[string]string{"PruneRetire": "idem_operations_retire", "PruneDelete": "idem_operations_tombstones"} {
		rows, err := s.DB().QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+retentionQueries.Get(q), 1, 10)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			rows.Scan(&id, &parent, &unused, &detail)
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "\n"), index) {
			t.Errorf("%s does not use %s:\n%s", q, index, strings.Join(plan, "\n"))
		}
	}
}
