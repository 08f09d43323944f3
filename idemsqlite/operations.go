package idemsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// idAttempts bounds the retries of a reservation whose fresh operation ID
// collided with an existing one (80 random bits: practically never).
const idAttempts = 3

// stamp returns the "now" argument of a statement and the time to stamp
// a new operation ID with, from one reading of the clock.
func (s *Store) stamp() (now any, idAt time.Time) {
	t := s.clock()
	if t.IsZero() {
		return nil, time.Now()
	}
	return t.UnixMicro(), t
}

// claimArgs are the arguments of ReserveInsert and ClaimInsert; the
// Limited variants take Claim.MaxActive after them.
func (s *Store) claimArgs(c registry.Claim) []any {
	now, idAt := s.stamp()
	return []any{
		now, c.Scope[:], cmp.Or(c.OperationID, idem.NewOperationID(idAt, c.Scope)), c.Operation, c.Owner[:], c.Fingerprint[:],
		idem.ContractVersion, c.WriterEpoch,
		c.LeaseOrDefault().Microseconds(), c.RetentionOrDefault().Microseconds(),
		tombstoneTTL(c), tenantArg(c),
	}
}

// insertQuery returns the insert statement for c, query (ReserveInsert
// or ClaimInsert) or its Limited variant when c.MaxActive is set, and its
// arguments.
func (s *Store) insertQuery(query string, c registry.Claim) (string, []any) {
	args := s.claimArgs(c)
	if c.MaxActive > 0 {
		return query + "Limited", append(args, c.MaxActive)
	}
	return query, args
}

// Reserve inserts a RESERVED record for c, owner generation 1, lease
// c.LeaseOrDefault() and retention c.RetentionOrDefault() from now, and
// commits; if the scope exists it returns the existing record and created
// false, never an error for the duplicate. It first reads the scope
// without a transaction (a replay takes no write lock); when absent it
// inserts in a BEGIN IMMEDIATE transaction, where SQLite's single writer
// makes the insert-or-read atomic: exactly one concurrent caller creates
// the record and the others read it. ctx governs the whole call.
//
// With c.MaxActive > 0 the insert is made only while c.Owner holds fewer
// than c.MaxActive RESERVED, EXECUTING or UNKNOWN records of c.Operation, counted
// by the insert statement itself inside the write transaction; otherwise
// Reserve writes nothing and returns an error wrapping
// registry.ErrActiveLimit. SQLite's single writer makes the count exact:
// concurrent reservations never overshoot the bound. A scope that exists
// is never refused: its record is returned as without the limit.
//
// Writer fence: see control.go (registry.ErrWriterFenced for a new scope
// when c.WriterEpoch is older than the registry's; an existing scope's
// record is still returned).
func (s *Store) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Record{}, false, err
	}
	rec, err := s.scanRecord(s.stmt("GetByScope").QueryRowContext(ctx, c.Scope[:]))
	if err == nil {
		return rec, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return registry.Record{}, false, s.fail("reserve", err)
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return registry.Record{}, false, s.fail("reserve", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	for attempt := 1; ; attempt++ {
		query, args := s.insertQuery("ReserveInsert", c)
		rec, err = s.scanRecord(s.txStmt(ctx, tx, query).QueryRowContext(ctx, args...))
		if err == nil {
			if err := tx.Commit(); err != nil {
				return registry.Record{}, false, s.fail("reserve", err)
			}
			return rec, true, nil
		}
		if errors.Is(err, sql.ErrNoRows) { // the scope exists, or the writer fence or active limit held
			rec, err = s.scanRecord(s.txStmt(ctx, tx, "GetByScope").QueryRowContext(ctx, c.Scope[:]))
			if errors.Is(err, sql.ErrNoRows) {
				if ferr := writerFenced(ctx, tx, c.WriterEpoch); ferr != nil {
					return registry.Record{}, false, s.fail("reserve", ferr)
				}
			}
			if errors.Is(err, sql.ErrNoRows) && c.MaxActive > 0 {
				return registry.Record{}, false, s.fail("reserve", registry.ErrActiveLimit)
			}
			if err != nil {
				return registry.Record{}, false, s.fail("reserve", err)
			}
			return rec, false, nil
		}
		// ON CONFLICT covers the scope only: a unique violation here is
		// the operation ID, so draw another.
		if !isUniqueViolation(err) || attempt == idAttempts {
			return registry.Record{}, false, s.fail("reserve", err)
		}
	}
}

// Release deletes the record if it is still RESERVED under rec.OwnerGen,
// so a retry can run; registry.ErrFenced otherwise. It runs in a write
// transaction, so it queues with the others (see Open). ctx governs the
// call.
func (s *Store) Release(ctx context.Context, rec registry.Record) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.writeTx(ctx, "release", func(tx *sql.Tx, _ any) error {
		res, err := s.txStmt(ctx, tx, "Release").ExecContext(ctx, rec.Scope[:], rec.OwnerGen, rec.OperationID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return registry.ErrFenced
		}
		return nil
	})
}

// TakeOver raises the owner generation of an in-flight record still at
// rec.OwnerGen whose lease has expired, keeping its state, and starts a
// new lease of the given length (lease <= 0 means registry.DefaultLease).
// It returns the updated record, or registry.ErrFenced when the record is
// not in flight, has another generation or its lease still runs. It runs
// in a BEGIN IMMEDIATE transaction; ctx governs the call.
func (s *Store) TakeOver(ctx context.Context, rec registry.Record, lease time.Duration) (registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Record{}, err
	}
	lease = registry.LeaseOrDefault(lease)
	var out registry.Record
	err := s.writeTx(ctx, "take over", func(tx *sql.Tx, now any) (err error) {
		out, err = s.scanRecord(s.txStmt(ctx, tx, "TakeOver").QueryRowContext(ctx,
			now, rec.Scope[:], rec.OwnerGen, lease.Microseconds(), rec.OperationID))
		if errors.Is(err, sql.ErrNoRows) {
			return registry.ErrFenced
		}
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
	rec, err := s.scanRecord(s.stmt("GetByScope").QueryRowContext(ctx, scope[:]))
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
	rec, err := s.scanRecord(s.stmt("GetByID").QueryRowContext(ctx, operationID))
	if err != nil {
		return registry.Record{}, s.fail("get by id", err)
	}
	return rec, nil
}
