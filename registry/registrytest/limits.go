package registrytest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// countOwned counts the records of one owner and operation.
const countOwned = `SELECT count(*) FROM idem_operations WHERE owner = $1 AND operation = $2`

// testInTx: Store.InTx commits fn's writes when fn returns nil, and rolls
// them back and returns fn's error unchanged when it does not.
func testInTx(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	write := func(key string, ret error) func(context.Context, registry.Tx) error {
		return func(ctx context.Context, tx registry.Tx) error {
			if tx.Native() == nil {
				return fmt.Errorf("Native returned nil")
			}
			n, err := tx.Exec(ctx, insertEffect, key, "in-tx")
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("insert affected %d rows, want 1", n)
			}
			var seen int64 // the transaction sees its own write
			if err := tx.QueryRow(ctx, countEffects, key).Scan(&seen); err != nil {
				return err
			}
			if seen != 1 {
				return fmt.Errorf("the transaction sees %d rows of its own insert, want 1", seen)
			}
			return ret
		}
	}

	if err := e.h.Store.InTx(e.ctx, write("intx-commit", nil)); err != nil {
		t.Fatalf("InTx with a succeeding function: %v", err)
	}
	if n := e.effects("intx-commit"); n != 1 {
		t.Errorf("after a committed InTx: %d business rows, want 1", n)
	}

	wrapped := fmt.Errorf("wrapped by the business code: %w", errBusiness)
	for _, ret := range []error{errBusiness, wrapped} {
		key := "intx-rollback-" + ret.Error()
		err := e.h.Store.InTx(e.ctx, write(key, ret))
		if !errors.Is(err, ret) || !errors.Is(err, errBusiness) {
			t.Errorf("InTx with a function failing with %q returned %v, want that error", ret, err)
		}
		if errors.Is(err, registry.ErrUnavailable) || errors.Is(err, registry.ErrFenced) {
			t.Errorf("InTx turned the function's error into a registry error: %v", err)
		}
		if n := e.effects(key); n != 0 {
			t.Errorf("after a failed InTx: %d business rows, want 0 (rolled back)", n)
		}
	}

	// Transactions are independent: a failure after a commit leaves the
	// committed rows alone.
	if n := e.effects("intx-commit"); n != 1 {
		t.Errorf("after later failed InTx calls: %d committed rows, want 1", n)
	}
}

// limitClaim is a claim for a new random scope of owner and operation,
// bounded by max in-flight records.
func (e *env) limitClaim(owner [32]byte, operation string, max int) registry.Claim {
	c := e.claim(operation)
	c.Owner = owner
	c.MaxActive = max
	return c
}

// refused checks that Reserve refuses c with ErrActiveLimit and writes no
// record.
func (e *env) refused(what string, c registry.Claim) {
	e.t.Helper()
	rec, created, err := e.h.Store.Reserve(e.ctx, c)
	if !errors.Is(err, registry.ErrActiveLimit) || created {
		e.t.Errorf("%s: Reserve: created %v record %s err %v, want ErrActiveLimit", what, created, rec.OperationID, err)
	}
	if _, err := e.h.Store.Get(e.ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		e.t.Errorf("%s: Get of the refused scope: %v, want ErrNotFound (no record)", what, err)
	}
}

// testMaxActive: with Claim.MaxActive set, Reserve refuses a new scope of
// an owner holding that many in-flight records of the operation — and only
// then: existing scopes, other owners, other operations, unbounded claims
// and terminal or released records are not affected; UNKNOWN ones count.
// ClaimAndExecute honours the bound the same way.
// Proves threat:key-flooding (docs/threat-model.md).
func testMaxActive(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const op, max = "conformance.limit", 3
	owner := e.bytes32()
	var held []registry.Claim
	var recs []registry.Record
	for range max {
		c := e.limitClaim(owner, op, max)
		held = append(held, c)
		recs = append(recs, e.reserve(c))
	}
	e.refused("fourth scope", e.limitClaim(owner, op, max))
	if n := e.count(countOwned, owner[:], op); n != max {
		t.Errorf("%d records of the owner, want %d", n, max)
	}

	// An existing scope is never refused, whatever its fingerprint.
	conflicting := held[1]
	conflicting.Fingerprint = e.fingerprint()
	for i, c := range []registry.Claim{held[0], conflicting} {
		rec, created, err := e.h.Store.Reserve(e.ctx, c)
		if err != nil || created || rec.OperationID != recs[i].OperationID {
			t.Errorf("Reserve of existing scope %d at the limit: created %v id %s err %v, want the record %s",
				i, created, rec.OperationID, err, recs[i].OperationID)
		}
	}

	// The in-transaction claim: an existing scope gets its verdict, a new
	// one is refused before fn runs, leaving nothing behind.
	res, err := e.h.ClaimAndExecute(e.ctx, held[2], effect("limited", outcome("limit", 0)))
	if err != nil || res.Verdict != registry.InProgress || res.Record.OperationID != recs[2].OperationID {
		t.Errorf("ClaimAndExecute of an existing scope at the limit: verdict %v id %s err %v, want in_progress %s",
			res.Verdict, res.Record.OperationID, err, recs[2].OperationID)
	}
	fresh := e.limitClaim(owner, op, max)
	ran := false
	res, err = e.h.ClaimAndExecute(e.ctx, fresh, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		ran = true
		return effect("limited", outcome("limit", 0))(ctx, tx, rec)
	})
	if !errors.Is(err, registry.ErrActiveLimit) || ran || res.Verdict == registry.Execute {
		t.Errorf("ClaimAndExecute of a new scope at the limit: verdict %v ran %v err %v, want ErrActiveLimit", res.Verdict, ran, err)
	}
	if _, err := e.h.Store.Get(e.ctx, fresh.Scope); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("ClaimAndExecute refused by the limit left a record: %v", err)
	}

	// The bound is per owner and operation.
	e.reserve(e.limitClaim(e.bytes32(), op, max))
	e.reserve(e.limitClaim(owner, op+".other", max))

	// Completing one of the three frees its slot, for one new record.
	e.complete(recs[0], outcome("limit-done", 0))
	e.reserve(e.limitClaim(owner, op, max))
	e.refused("after taking the freed slot", e.limitClaim(owner, op, max))

	// The bound is the claim's: none without it, a larger one with it.
	e.reserve(e.limitClaim(owner, op, 0))
	e.refused("at exactly the count", e.limitClaim(owner, op, max+1))
	e.reserve(e.limitClaim(owner, op, max+2))

	// EXECUTING and UNKNOWN count (an UNKNOWN operation is still in flight
	// for its owner); a released record frees its slot.
	c := e.limitClaim(owner, op+".states", 2)
	e.reserve(c)
	second := e.reserve(e.limitClaim(owner, c.Operation, 2))
	if err := e.move(c.Scope, idem.StateExecuting); err != nil {
		t.Fatalf("move to EXECUTING: %v", err)
	}
	e.refused("with one RESERVED and one EXECUTING", e.limitClaim(owner, c.Operation, 2))
	if err := e.move(c.Scope, idem.StateUnknown); err != nil {
		t.Fatalf("move to UNKNOWN: %v", err)
	}
	e.refused("with one RESERVED and one UNKNOWN", e.limitClaim(owner, c.Operation, 2))
	if err := e.h.Store.Release(e.ctx, second); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e.reserve(e.limitClaim(owner, c.Operation, 2))
	e.refused("with one RESERVED and one UNKNOWN after a release", e.limitClaim(owner, c.Operation, 2))
}

// testMaxActiveRace: racing reservations of distinct scopes by one owner
// may overshoot MaxActive (registry.Claim documents by how much) but
// never stop short of it, and every refusal is ErrActiveLimit.
// Proves threat:key-flooding (docs/threat-model.md).
func testMaxActiveRace(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const op, max, n = "conformance.limit-race", 5, 20
	owner := e.bytes32()
	claims := make([]registry.Claim, n)
	for i := range claims {
		claims[i] = e.limitClaim(owner, op, max)
	}
	type obs struct {
		rec     registry.Record
		created bool
		err     error
	}
	hist := make([]obs, n)
	race(n, func(i int) {
		hist[i].rec, hist[i].created, hist[i].err = e.h.Store.Reserve(e.ctx, claims[i])
	})
	created := 0
	for i, o := range hist {
		switch {
		case o.err == nil && o.created:
			created++
		case o.err == nil:
			t.Errorf("racer %d: an existing record for a new scope (id %s)", i, o.rec.OperationID)
		case !errors.Is(o.err, registry.ErrActiveLimit):
			t.Errorf("racer %d: %v, want success or ErrActiveLimit", i, o.err)
		default:
			if _, err := e.h.Store.Get(e.ctx, claims[i].Scope); !errors.Is(err, registry.ErrNotFound) {
				t.Errorf("racer %d was refused but its scope has a record (%v)", i, err)
			}
		}
	}
	t.Logf("%d of %d racers created a record with MaxActive %d", created, n, max)
	if created < max || created > n {
		t.Errorf("%d records created, want between %d and %d", created, max, n)
	}
	if got := e.count(countOwned, owner[:], op); got != int64(created) {
		t.Errorf("%d records stored, %d reported created", got, created)
	}
	e.refused("after the race", e.limitClaim(owner, op, max))
}
