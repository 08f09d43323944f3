package idemmysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// idAttempts bounds the retries of a reservation whose fresh operation ID
// collided with an existing one (80 random bits: practically never), and
// deadlockAttempts those of a statement InnoDB chose as a deadlock victim.
const (
	idAttempts       = 3
	deadlockAttempts = 5
	// vanishedAttempts bounds Reserve's tries for a scope that others
	// keep reserving and releasing between its insert and its read.
	vanishedAttempts = 100
)

// claimArgs are the arguments of ClaimInsert; ClaimInsertLimited takes
// Claim.MaxActive after them.
func (s *Store) claimArgs(c registry.Claim) (string, []any) {
	now, idAt := s.stamp()
	args := []any{
		now, c.Scope[:], cmp.Or(c.OperationID, idem.NewOperationID(idAt, c.Scope)), c.Operation, c.Owner[:], c.Fingerprint[:],
		idem.ContractVersion, c.WriterEpoch,
		c.LeaseOrDefault().Microseconds(), c.RetentionOrDefault().Microseconds(),
		tombstoneTTL(c), tenantHash(c),
	}
	if c.MaxActive > 0 {
		return queries.Get("ClaimInsertLimited"), append(args, c.MaxActive)
	}
	return queries.Get("ClaimInsert"), args
}

// insertClaim runs the claim insert for c on q, drawing a new operation
// ID when the drawn one collided. It reports whether a row was inserted
// (false: the writer fence or the active limit held) or the insert's
// error: a duplicate scope is a duplicate-entry error on PRIMARY.
func (s *Store) insertClaim(ctx context.Context, q querier, c registry.Claim) (bool, error) {
	for attempt := 1; ; attempt++ {
		query, args := s.claimArgs(c)
		n, err := exec(ctx, q, query, args...)
		if err == nil {
			return n == 1, nil
		}
		if key, dup := duplicateKey(err); dup && key != "PRIMARY" && attempt < idAttempts {
			continue // the operation ID collided: draw another
		}
		return false, err
	}
}

// Reserve inserts a RESERVED record for c, owner generation 1, lease
// c.LeaseOrDefault() and retention c.RetentionOrDefault() from now, and
// commits; if the scope exists it returns the existing record and created
// false, never an error for the duplicate. It first reads the scope (a
// replay takes no lock); when absent it inserts, in autocommit: the
// primary key on scope is the acceptance point — of concurrent inserts
// one commits and the others, after waiting for it, fail with a
// duplicate-key error and read its record. A deadlock (InnoDB's lock
// upgrade between waiters of a rolled-back insert) is retried: nothing
// was written (up to 5 tries). A duplicate whose record was released
// before it could be read is tried again (up to 100 tries, then an error
// wrapping registry.ErrUnavailable). ctx governs the whole call.
//
// With c.MaxActive > 0 the insert is made only while c.Owner holds fewer
// than c.MaxActive active records of c.Operation (ClaimInsertLimited);
// otherwise Reserve writes nothing and returns an error wrapping
// registry.ErrActiveLimit. Concurrent reservations may overshoot the bound
// by the number of racers. A scope that exists is never refused.
//
// Writer fence: registry.ErrWriterFenced for a new scope when
// c.WriterEpoch is older than the registry's; an existing scope's record
// is still returned.
func (s *Store) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Record{}, false, err
	}
	rec, err := s.scanRecord(queryRow(ctx, s.db, queries.Get("GetByScope"), c.Scope[:]))
	if err == nil {
		return rec, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return registry.Record{}, false, s.fail("reserve", err)
	}
	for deadlocks, vanished := 0, 0; ; {
		rec, created, err := s.reserveOnce(ctx, c)
		switch {
		case isDeadlock(err) && deadlocks+1 < deadlockAttempts:
			// A deadlock wrote nothing: run again, after a pause.
			deadlocks++
			deadlockPause(ctx, deadlocks)
			continue
		case errors.Is(err, errVanished) && vanished+1 < vanishedAttempts && ctx.Err() == nil:
			// The duplicate's record was released before it could be
			// read: the scope is free again, and whoever released it made
			// progress. Try again at once.
			vanished++
			continue
		case errors.Is(err, errVanished):
			err = fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
		}
		if err != nil {
			return registry.Record{}, false, s.fail("reserve", err)
		}
		return rec, created, nil
	}
}

// errVanished reports a scope whose insert met a duplicate but whose
// record was gone (released) when read.
var errVanished = errors.New("the scope's record was released while it was being reserved")

// reserveOnce is one attempt of Reserve's insert-or-read. Its errors are
// untranslated.
func (s *Store) reserveOnce(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	inserted, err := s.insertClaim(ctx, s.db, c)
	if key, dup := duplicateKey(err); err != nil && !(dup && key == "PRIMARY") {
		return registry.Record{}, false, err
	}
	rec, rerr := s.scanRecord(queryRow(ctx, s.db, queries.Get("GetByScope"), c.Scope[:]))
	switch {
	case rerr == nil:
		return rec, inserted, nil
	case !errors.Is(rerr, sql.ErrNoRows):
		return registry.Record{}, false, rerr
	case err != nil:
		return registry.Record{}, false, errVanished
	}
	if ferr := writerFenced(ctx, s.db, c.WriterEpoch); ferr != nil {
		return registry.Record{}, false, ferr
	}
	if c.MaxActive > 0 {
		return registry.Record{}, false, registry.ErrActiveLimit
	}
	return registry.Record{}, false, errVanished
}

// Release deletes the record if it is still RESERVED under rec.OwnerGen,
// so a retry can run; registry.ErrFenced otherwise. ctx governs the call.
func (s *Store) Release(ctx context.Context, rec registry.Record) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	n, err := exec(ctx, s.db, queries.Get("Release"), rec.Scope[:], rec.OwnerGen, rec.OperationID)
	if err != nil {
		return s.fail("release", err)
	}
	if n == 0 {
		return s.fail("release", registry.ErrFenced)
	}
	return nil
}

// TakeOver raises the owner generation of an in-flight record still at
// rec.OwnerGen whose lease has expired, keeping its state, and starts a
// new lease of the given length (lease <= 0 means registry.DefaultLease).
// It returns the updated record, or registry.ErrFenced when the record is
// not in flight, has another generation or its lease still runs. The
// compare-and-set and the read of the row it locked are one transaction;
// ctx governs the call.
func (s *Store) TakeOver(ctx context.Context, rec registry.Record, lease time.Duration) (registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Record{}, err
	}
	lease = registry.LeaseOrDefault(lease)
	var out registry.Record
	err := s.writeTx(ctx, "take over", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, queries.Get("TakeOver"), now, rec.Scope[:], rec.OwnerGen, lease.Microseconds(), rec.OperationID)
		if err != nil {
			return err
		}
		if n == 0 {
			return registry.ErrFenced
		}
		out, err = s.scanRecord(queryRow(ctx, tx, queries.Get("GetByScope"), rec.Scope[:]))
		return err
	})
	if err != nil {
		return registry.Record{}, err
	}
	return out, nil
}

// Get returns the record with that scope, or registry.ErrNotFound. A
// stored response that does not match its digest yields an error wrapping
// idem.ErrDigestMismatch. ctx governs the call.
func (s *Store) Get(ctx context.Context, scope idem.ScopeHash) (registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Record{}, err
	}
	rec, err := s.scanRecord(queryRow(ctx, s.db, queries.Get("GetByScope"), scope[:]))
	if err != nil {
		return registry.Record{}, s.fail("get", err)
	}
	return rec, nil
}

// GetByID returns the record with that operation ID, or
// registry.ErrNotFound; responses are verified as by Get. ctx governs the
// call.
func (s *Store) GetByID(ctx context.Context, operationID string) (registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Record{}, err
	}
	rec, err := s.scanRecord(queryRow(ctx, s.db, queries.Get("GetByID"), operationID))
	if err != nil {
		return registry.Record{}, s.fail("get by id", err)
	}
	return rec, nil
}
