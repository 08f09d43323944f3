package idempg

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// TestMigration004Upgrade: a registry at migration 003 with records in it
// gets the retention columns and constraints from 004 without losing a
// column of any record; the new constraints hold for them.
func TestMigration004Upgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, dsn := upgradeFrom(t, "004")
	reserved, done := newClaim("upgrade"), newClaim("upgrade")
	resp := idem.Response{Status: 201, MediaType: "application/json", Location: "/x/1", ETag: `"1"`, Body: []byte("{}\x00")}
	d := resp.Digest()
	const insert = `INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
		owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
		resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest)
		VALUES ($1, $2, 'upgrade', $3, $4, 'http.idempotency.v1', $5, 2, 3, now(), now(), now(), now(), $6, $7, $8, $9, $10, $11)`
	if _, err := pool.Exec(ctx, insert, reserved.Scope[:], "op_reserved", reserved.Owner[:], reserved.Fingerprint[:],
		"RESERVED", nil, nil, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insert, done.Scope[:], "op_done", done.Owner[:], done.Fingerprint[:],
		"SUCCEEDED", resp.Status, resp.MediaType, resp.Location, resp.ETag, resp.Body, d[:]); err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatalf("Open (migrating from 003): %v", err)
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
			rec.OwnerGen != 2 || rec.WriterEpoch != 3 || rec.Retired() || rec.TombstoneTTL != 0:
			t.Errorf("%s after the upgrade: %+v", c.id, rec)
		case c.state.Terminal() && (rec.Response == nil || string(rec.Response.Body) != string(resp.Body)):
			t.Errorf("%s after the upgrade: response %+v, want %+v", c.id, rec.Response, resp)
		}
	}
	if _, err := pool.Exec(ctx, `DELETE FROM idem_operations WHERE scope = $1`, done.Scope[:]); err == nil {
		t.Errorf("the upgraded table let a finished record be deleted")
	}
	// Retirement of the upgraded record, as Prune does it.
	if _, err := pool.Exec(ctx, `UPDATE idem_operations SET expires_at = created_at WHERE scope = $1`, done.Scope[:]); err == nil {
		t.Errorf("the upgraded table let a finished record's expiry change")
	}
	// Both retire: the expired record, and the reservation, abandoned (its
	// lease over, and its retention of 0 since).
	if res, err := s.Prune(ctx, 10); err != nil || res.Retired != 2 {
		t.Errorf("Prune of the upgraded, expired record: %+v %v", res, err)
	}
}
