package idempg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// reserveAttempts bounds Reserve's loop. A second round is needed only
// when the record that blocked the insert was deleted (released) before
// it could be read; several in a row mean the scope is being reserved and
// released in a tight loop.
const reserveAttempts = 8

// Reserve inserts a RESERVED record for c owned by generation 1 and
// commits it, or returns the existing record for c.Scope with created
// false. Exactly one of any number of concurrent callers for a scope gets
// created true; the others get the record (never registry.ErrNotFound).
// ctx governs the statements.
//
// Cost: a replay (the common retry) is one indexed read. A new scope
// costs that read and one more statement (queries.sql, Reserve), which
// returns the scope's record if its snapshot sees one, else inserts; only
// when neither is visible — the scope was inserted by a concurrent
// transaction after the statement's snapshot, or released meanwhile —
// does Reserve read again. (Sending that one statement alone would save
// the first read on a new scope, but as an INSERT it costs a replay about
// twice the server time of the read: measured in docs/benchmarks.md.)
//
// Durability: the reservation commits with synchronous_commit off, for its
// own transaction only, so it does not wait for its WAL to reach disk. That
// is safe because a reservation guards only effects in this same database:
// every later synchronous commit (Complete's, which records the business
// effect) flushes the WAL up to and including the reservation first, since
// WAL is flushed in order; and if a crash loses the reservation, nothing it
// guarded can have committed, so the client's retry simply reserves again.
//
// With c.MaxActive > 0 the insert is made only while c.Owner holds fewer
// than c.MaxActive RESERVED, EXECUTING or UNKNOWN records of c.Operation, counted
// in the insert's own statement; otherwise Reserve returns an error
// wrapping registry.ErrActiveLimit and writes nothing. A scope that exists
// is never refused: its record is returned as without the limit. Racing
// reservations do not see each other's uncommitted rows, so they may
// overshoot the bound by up to their number. When the limit holds, the
// insert is not attempted and so does not wait for a concurrent,
// still-uncommitted claim of the same scope (an in-transaction
// ClaimAndExecute): such a Reserve gets ErrActiveLimit where it would
// otherwise have waited and returned that record.
//
// Writer fence: see control.go (registry.ErrWriterFenced for a new scope
// when c.WriterEpoch is older than the registry's; an existing scope's
// record is still returned).
func (s *Store) Reserve(ctx context.Context, c registry.Claim) (registry.Record, bool, error) {
	if rec, err := s.Get(ctx, c.Scope); !errors.Is(err, registry.ErrNotFound) {
		return rec, false, err
	}
	// Only a new scope needs an operation ID and the insert's parameters.
	now, goNow := s.clock()
	query, args := "Reserve", claimArgs(c, newOperationID(c, goNow), now)
	if c.MaxActive > 0 {
		query, args = "ReserveLimited", append(args, c.MaxActive)
	}
	for range reserveAttempts {
		var created bool
		rec, err := s.scanRecord(s.lane.QueryRow(ctx, queries.Get(query), args...), &created)
		if err == nil {
			return rec, created, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return registry.Record{}, false, fmt.Errorf("idempg: reserve: %w", translate(err))
		}
		// Neither found nor inserted. This is a new statement with a new
		// snapshot, so it sees the row a concurrent transaction committed
		// after the first one's snapshot was taken (the insert waited for
		// that commit).
		rec, err = s.Get(ctx, c.Scope)
		if !errors.Is(err, registry.ErrNotFound) {
			return rec, false, err
		}
		if err := writerFenced(ctx, s.lane, c.WriterEpoch); err != nil {
			return registry.Record{}, false, fmt.Errorf("idempg: reserve: %w", err)
		}
		if c.MaxActive > 0 {
			// No record: either the limit held or the record that blocked
			// the insert was released. Count again: a slot freed since
			// means the insert is worth another try.
			full, err := s.activeLimitReached(ctx, c)
			if err != nil {
				return registry.Record{}, false, err
			}
			if full {
				return registry.Record{}, false, fmt.Errorf("idempg: reserve: %w", registry.ErrActiveLimit)
			}
		}
		// Released between the two statements: insert again.
	}
	return registry.Record{}, false, fmt.Errorf("idempg: reserve: %w: the scope was released %d times in a row while reserving",
		registry.ErrUnavailable, reserveAttempts)
}

// activeLimitReached reports whether c.Owner holds at least c.MaxActive
// active records of c.Operation: UNKNOWN ones, and RESERVED or EXECUTING
// ones whose lease has not expired.
func (s *Store) activeLimitReached(ctx context.Context, c registry.Claim) (bool, error) {
	var full bool
	now, _ := s.clock()
	err := s.lane.QueryRow(ctx, queries.Get("ActiveLimitReached"), c.Owner[:], c.Operation, c.MaxActive, now).Scan(&full)
	if err != nil {
		return false, fmt.Errorf("idempg: reserve: counting active records: %w", translate(err))
	}
	return full, nil
}

// claimArgs are the parameters of the Reserve and Claim queries; the
// limited variants take Claim.MaxActive after them.
func claimArgs(c registry.Claim, operationID string, now *time.Time) []any {
	return []any{
		c.Scope[:], operationID, c.Operation, c.Owner[:], c.Fingerprint[:],
		idem.ContractVersion, c.WriterEpoch,
		micros(c.LeaseOrDefault()), micros(c.RetentionOrDefault()), now,
		tombstoneTTL(c), tenantArg(c),
	}
}

// Get returns the record with that scope, or registry.ErrNotFound; a stored
// response that does not match its digest is idem.ErrDigestMismatch. ctx
// governs the query.
func (s *Store) Get(ctx context.Context, scope idem.ScopeHash) (registry.Record, error) {
	rec, err := s.scanRecord(s.lane.QueryRow(ctx, queries.Get("GetByScope"), scope[:]))
	if err != nil {
		return registry.Record{}, fmt.Errorf("idempg: get: %w", translate(err))
	}
	return rec, nil
}

// GetByID returns the record with that operation ID, or
// registry.ErrNotFound; see Get. ctx governs the query.
func (s *Store) GetByID(ctx context.Context, operationID string) (registry.Record, error) {
	rec, err := s.scanRecord(s.lane.QueryRow(ctx, queries.Get("GetByID"), operationID))
	if err != nil {
		return registry.Record{}, fmt.Errorf("idempg: get by id: %w", translate(err))
	}
	return rec, nil
}

// Release deletes rec's record if it is still RESERVED at rec.OwnerGen,
// else returns registry.ErrFenced. The delete commits durably. ctx governs
// the statement.
func (s *Store) Release(ctx context.Context, rec registry.Record) error {
	tag, err := s.lane.Exec(ctx, queries.Get("Release"), rec.Scope[:], rec.OwnerGen, rec.OperationID)
	if err != nil {
		return fmt.Errorf("idempg: release: %w", translate(err))
	}
	if tag.RowsAffected() == 0 { // the statement returns one row per deleted record
		return fmt.Errorf("idempg: release %s: %w", rec.OperationID, registry.ErrFenced)
	}
	return nil
}

// TakeOver raises the owner generation of rec's record by one and starts a
// new lease of length lease (0 or less means registry.DefaultLease), if
// the record is RESERVED or EXECUTING, still at rec.OwnerGen, and its
// lease has expired at the store's "now"; else registry.ErrFenced. The
// state is kept. ctx governs the statement.
func (s *Store) TakeOver(ctx context.Context, rec registry.Record, lease time.Duration) (registry.Record, error) {
	lease = registry.LeaseOrDefault(lease)
	now, _ := s.clock()
	got, err := s.scanRecord(s.pool.QueryRow(ctx, queries.Get("TakeOver"), rec.Scope[:], rec.OwnerGen, micros(lease), now, rec.OperationID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return registry.Record{}, fmt.Errorf("idempg: take over %s: %w", rec.OperationID, registry.ErrFenced)
	case err != nil:
		return registry.Record{}, fmt.Errorf("idempg: take over: %w", translate(err))
	}
	return got, nil
}

// scanRecord reads one record row (the column order of queries.sql),
// converting times to UTC, opening a sealed response body with the
// Store's Sealer (registry.ErrUnreadable, wrapped, if it cannot) and
// verifying the response against its digest (idem.ErrDigestMismatch,
// wrapped, on mismatch). lead are the
// destinations of columns that come before the record's, if any. Database
// errors are returned untranslated.
func (s *Store) scanRecord(row pgx.Row, lead ...any) (registry.Record, error) {
	var (
		r                         registry.Record
		scope, owner, fingerprint []byte
		state                     string
		status                    *int32
		mediaType, location, etag *string
		body, digest              []byte
		bodyKey                   *string
		leaseUntil, expiresAt     time.Time
		createdAt, updatedAt      time.Time
		retiredAt, tombstoneUntil *time.Time
		ttl                       *int64
		tenant                    []byte
	)
	err := row.Scan(append(lead, &scope, &r.OperationID, &r.Operation, &owner, &fingerprint, &r.Contract,
		&state, &r.OwnerGen, &r.WriterEpoch, &leaseUntil, &expiresAt, &createdAt, &updatedAt,
		&status, &mediaType, &location, &etag, &body, &digest, &bodyKey,
		&retiredAt, &tombstoneUntil, &ttl, &tenant)...)
	if err != nil {
		return registry.Record{}, err
	}
	scanTombstone(&r, retiredAt, tombstoneUntil, ttl)
	copy(r.Scope[:], scope)
	copy(r.Owner[:], owner)
	copy(r.Fingerprint[:], fingerprint)
	copy(r.TenantHash[:], tenant) // NULL (unattributed) leaves it zero
	r.State = idem.State(state)
	r.LeaseUntil, r.ExpiresAt = leaseUntil.UTC(), expiresAt.UTC()
	r.CreatedAt, r.UpdatedAt = createdAt.UTC(), updatedAt.UTC()
	if status != nil {
		body, err := registry.OpenBody(s.sealer, bodyKey, body, registry.ResponseOf(r.Scope, r.OperationID, digest))
		if err != nil {
			return registry.Record{}, fmt.Errorf("idempg: operation %s: %w", r.OperationID, err)
		}
		resp := idem.Response{
			Status:    int(*status),
			MediaType: deref(mediaType),
			Location:  deref(location),
			ETag:      deref(etag),
			Body:      body,
		}
		if resp.Body == nil {
			resp.Body = []byte{}
		}
		if err := resp.Verify(digest); err != nil {
			return registry.Record{}, fmt.Errorf("idempg: operation %s: %w", r.OperationID, err)
		}
		r.Response = &resp
	}
	return r, nil
}

// tenantArg is the tenant_hash parameter of a claim's insert.
func tenantArg(c registry.Claim) []byte {
	h := registry.TenantHash(c.Tenant)
	return h[:]
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
