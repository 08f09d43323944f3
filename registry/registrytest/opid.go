package registrytest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// insertCopy inserts a record at scope with operation ID id, every other
// column copied from the record of scope from (the test hook for a record
// written by an older binary or imported from another registry). The
// statement is portable across the drivers.
const insertCopy = `INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
	state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at)
	SELECT $1, $2, operation, owner, fingerprint, contract, state, owner_gen, writer_epoch,
	       lease_until, expires_at, created_at, updated_at
	FROM idem_operations WHERE scope = $3`

// testGetByIDScopeLed: operation IDs lead to their scope (layout v1,
// docs/contract.md "Operation IDs"), and GetByID finds a record by them
// through the primary key: a record's ID names a scope range holding its
// scope; two records whose scopes share the ID's 40-bit prefix are each
// found by their own ID, and an ID that shares the prefix but not the
// rest is ErrNotFound; so is a malformed ID. IDs that do not lead to
// their scope — the legacy ULID layout of an older binary, or a v1 ID a
// record was imported with — stay findable (the compatibility path of
// idempg's migration 026, idemsqlite's 021 and idemmysql's 012), and stay
// unique: a second record with a legacy ID already held is refused.
//
// Proves threat:guessed-operation-ids and threat:scope-prefix-in-id
// (docs/threat-model.md): the scope prefix never stands in for the random
// part, and a record is found by its whole ID only.
func testGetByIDScopeLed(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	c := e.claim("conformance.opid")
	rec := e.reserve(c)
	lo, hi, ok := idem.OperationIDScopeRange(rec.OperationID)
	if !ok || bytes.Compare(lo[:], c.Scope[:]) > 0 || bytes.Compare(c.Scope[:], hi[:]) > 0 {
		t.Fatalf("operation ID %q does not lead to its scope %x", rec.OperationID, c.Scope[:])
	}

	// A second record whose scope shares the first one's prefix.
	near := e.claim("conformance.opid")
	copy(near.Scope[:idem.ScopePrefixLen], c.Scope[:idem.ScopePrefixLen])
	rec2 := e.reserve(near)
	if rec2.OperationID[14:24] != rec.OperationID[14:24] {
		t.Fatalf("IDs %q and %q of scopes of one prefix carry different prefixes", rec.OperationID, rec2.OperationID)
	}
	for _, want := range []registry.Record{rec, rec2} {
		got, err := e.h.Store.GetByID(e.ctx, want.OperationID)
		if err != nil || got.Scope != want.Scope || got.OperationID != want.OperationID {
			t.Errorf("GetByID(%q) = scope %x, ID %q, %v; want scope %x", want.OperationID, got.Scope[:], got.OperationID, err, want.Scope[:])
		}
	}

	// Same prefix, another ID: the other record's random part, and the
	// first's with one character changed.
	last := rec.OperationID[len(rec.OperationID)-1]
	swapped := rec.OperationID[:24] + rec2.OperationID[24:]
	changed := rec.OperationID[:len(rec.OperationID)-1] + string("01"[btoi(last == '0')])
	lower := rec.OperationID[:14] + strings.ToLower(rec.OperationID[14:24]) + rec.OperationID[24:]
	for _, id := range []string{swapped, changed, lower, "", "op_", rec.OperationID[:39], rec.OperationID + "0",
		"op_1" + strings.Repeat("Z", 36), strings.Repeat("x", 4096)} {
		if got, err := e.h.Store.GetByID(e.ctx, id); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("GetByID(%q) = %q, %v; want ErrNotFound", id, got.OperationID, err)
		}
	}

	// Records whose IDs do not lead to their scope.
	legacy := "op_01" + e.crockford(24)
	imported := idem.NewOperationID(base, idem.ScopeHash(e.bytes32()))
	for _, id := range []string{legacy, imported} {
		scope := e.bytes32()
		if err := e.h.Exec(e.ctx, insertCopy, scope[:], id, c.Scope[:]); err != nil {
			t.Fatalf("inserting a record with the ID %q: %v", id, err)
		}
		got, err := e.h.Store.GetByID(e.ctx, id)
		if err != nil || got.Scope != scope || got.OperationID != id {
			t.Errorf("GetByID(%q) = scope %x, %v; want the record of scope %x", id, got.Scope[:], err, scope[:])
		}
	}
	if got, err := e.h.Store.GetByID(e.ctx, "op_01"+e.crockford(24)); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("GetByID of another legacy ID = %q, %v; want ErrNotFound", got.OperationID, err)
	}
	other := e.bytes32()
	if err := e.h.Exec(e.ctx, insertCopy, other[:], legacy, c.Scope[:]); err == nil {
		t.Errorf("a second record with the legacy ID %q was stored", legacy)
	}
}

// crockford returns n random characters of the Crockford alphabet.
func (e *env) crockford(n int) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[e.rng.IntN(len(alphabet))]
	}
	return string(b)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
