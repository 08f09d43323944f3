package idemmysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/ownedtx"
	"github.com/idemkit/idem/registry"
)

// Complete begins a transaction, runs fn in it and, in the same
// transaction, moves the record from RESERVED or EXECUTING to the
// outcome's state under rec.OwnerGen (one compare-and-set UPDATE), stores
// the response and its digest and inserts the outbox rows; then commits,
// durably (Open checked innodb_flush_log_at_trx_commit=1). fn's error is
// returned unchanged after a rollback; registry.ErrFenced (all rolled
// back) when the record has another owner generation or is no longer in
// flight; an error, nothing committed, when the outcome is not terminal
// or not a legal transition from rec.State. It returns the committed
// record, Response set. ctx governs the whole transaction: if it ends
// before the commit, everything rolls back. A deadlock is not retried
// here: fn ran, and it is the caller's to run again.
//
// Writer fence: registry.ErrWriterFenced, all rolled back, when
// rec.WriterEpoch is older than the registry's.
func (s *Store) Complete(ctx context.Context, rec registry.Record, fn registry.BusinessFunc) (registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Record{}, err
	}
	octx, o := ownedtx.Context(ctx)
	tx, err := s.db.BeginTx(octx, nil)
	if err != nil {
		return registry.Record{}, s.fail("complete", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	out, err := fn(ctx, sqlTx{tx}, rec)
	if err != nil {
		return registry.Record{}, err
	}
	done, err := s.record(ctx, tx, rec, out)
	if err != nil {
		return registry.Record{}, err
	}
	if err := ownedtx.Commit(tx, o); err != nil {
		return registry.Record{}, s.fail("complete", err)
	}
	return done, nil
}

// ClaimAndExecute is the in-transaction style. tx is the caller's
// transaction, begun on the Store's database (DB) or on any pool of the
// same database whose sessions run at READ COMMITTED.
//
// Inside tx it inserts the claim as RESERVED, owner generation 1 (a plain
// INSERT: the primary key on scope is the acceptance point; a concurrent
// claim of the same scope waits for tx to end), calls fn with tx and the
// new record, then records fn's outcome exactly as Complete does, and
// returns Result{Execute, record as it will commit}. The caller commits
// tx. If fn or recording the outcome fails, that error is returned and the
// caller must roll back; the claim vanishes with tx.
//
// If the insert fails, whatever the error, tx is rolled back and is
// unusable afterwards; the record for c.Scope is then read on a fresh
// connection of the Store: when it exists the result is
// registry.Decide(record, false, c.Fingerprint) with a nil error (Replay,
// Conflict, InProgress or Unknown); when it does not, the insert's own
// error is returned, translated (registry.ErrUnavailable for a lost
// connection, a lock wait timeout or a deadlock) and never as a conflict.
// ctx governs the call and the re-read.
//
// c.MaxActive is honoured as by Reserve, in the claim insert itself; a
// claim refused by it, or by the writer fence, is lost like a failed
// insert, with registry.ErrActiveLimit or registry.ErrWriterFenced for a
// scope that does not exist.
func (s *Store) ClaimAndExecute(ctx context.Context, tx *sql.Tx, c registry.Claim, fn registry.BusinessFunc) (registry.Result, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Result{}, err
	}
	rec, insErr := s.claimInsert(ctx, tx, c)
	if insErr != nil {
		_ = tx.Rollback()
		existing, err := s.Get(ctx, c.Scope)
		return s.lostClaim(c, insErr, existing, err)
	}
	out, err := fn(ctx, sqlTx{tx}, rec)
	if err != nil {
		return registry.Result{}, err
	}
	done, err := s.record(ctx, tx, rec, out)
	if err != nil {
		return registry.Result{}, err
	}
	return registry.Result{Verdict: registry.Execute, Record: done}, nil
}

// claimInsert inserts the claim for c as RESERVED inside tx and returns
// the new record, or the reason it was not inserted: the insert's error,
// registry.ErrWriterFenced or registry.ErrActiveLimit.
func (s *Store) claimInsert(ctx context.Context, tx *sql.Tx, c registry.Claim) (registry.Record, error) {
	inserted, err := s.insertClaim(ctx, tx, c)
	if err != nil {
		return registry.Record{}, err
	}
	if !inserted {
		return registry.Record{}, cmp.Or(writerFenced(ctx, tx, c.WriterEpoch), registry.ErrActiveLimit)
	}
	return s.scanRecord(queryRow(ctx, tx, queries.Get("GetByScope"), c.Scope[:]))
}

// lostClaim is the result of a claim whose insert failed with insErr,
// given the record then read for its scope (or the error reading it): the
// verdict on an existing record with a nil error, else the insert's error,
// never a conflict.
func (s *Store) lostClaim(c registry.Claim, insErr error, existing registry.Record, err error) (registry.Result, error) {
	switch {
	case err == nil:
		return registry.Result{Verdict: registry.Decide(existing, false, c.Fingerprint), Record: existing}, nil
	case errors.Is(err, registry.ErrNotFound):
		return registry.Result{}, s.fail("claim", insErr)
	default:
		return registry.Result{}, fmt.Errorf("%w (then reading the record: %w)", s.fail("claim", insErr), err)
	}
}

// record writes out as the outcome of rec inside tx: the fenced
// compare-and-set to the terminal state with the response and its digest,
// then the outbox rows. It returns the updated record.
func (s *Store) record(ctx context.Context, tx *sql.Tx, rec registry.Record, out registry.Outcome) (registry.Record, error) {
	if err := checkOutcome(rec, out); err != nil {
		return registry.Record{}, err
	}
	resp := out.Response
	digest := resp.Digest()
	key, body, err := s.sealResponse(rec.Scope, rec.OperationID, digest[:], resp.Body)
	if err != nil {
		return registry.Record{}, err
	}
	now, _ := s.stamp()
	n, err := exec(ctx, tx, queries.Get("CompleteOperation"),
		now, rec.Scope[:], rec.OwnerGen, string(out.State),
		resp.Status, resp.MediaType, resp.Location, resp.ETag, body, digest[:], rec.OperationID, rec.WriterEpoch, key)
	if err != nil {
		return registry.Record{}, s.fail("complete", err)
	}
	if n == 0 {
		return registry.Record{}, s.fail("complete", cmp.Or(writerFenced(ctx, tx, rec.WriterEpoch), registry.ErrFenced))
	}
	done, err := s.scanRecord(queryRow(ctx, tx, queries.Get("GetByScope"), rec.Scope[:]))
	if err != nil {
		return registry.Record{}, s.fail("complete", err)
	}
	for i, m := range out.Outbox {
		if err := s.insertOutbox(ctx, tx, now, done.OperationID, i, m); err != nil {
			return registry.Record{}, s.fail("complete: outbox", err)
		}
	}
	return done, nil
}

// insertOutbox inserts the i-th outbox message m of an operation, its
// payload sealed with the Store's Sealer, if any, and bound to the
// message.
func (s *Store) insertOutbox(ctx context.Context, tx *sql.Tx, now any, operationID string, i int, m registry.Message) error {
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	id := registry.MessageID(operationID, i)
	key, payload, err := registry.SealPayload(s.sealer, id, m.Topic, payload)
	if err != nil {
		return err
	}
	_, err = exec(ctx, tx, queries.Get("InsertOutbox"), now, id, operationID, m.Topic, payload, key, m.Trace)
	return err
}

// checkOutcome refuses an outcome that is not terminal, that is not a
// legal transition from rec.State (from RESERVED or EXECUTING when
// rec.State is not one of them: the compare-and-set then decides), or
// whose response breaks the storage rules (idem.Response.Storable).
func checkOutcome(rec registry.Record, out registry.Outcome) error {
	to := out.State
	if !to.Terminal() {
		return fmt.Errorf("idemmysql: complete: outcome state %q is not terminal", to)
	}
	legal := idem.CanTransition(rec.State, to)
	if !rec.State.InFlight() {
		legal = idem.CanTransition(idem.StateReserved, to) || idem.CanTransition(idem.StateExecuting, to)
	}
	if !legal {
		return fmt.Errorf("idemmysql: complete: illegal transition %s -> %s", rec.State, to)
	}
	if err := out.Response.Storable(); err != nil {
		return fmt.Errorf("idemmysql: complete: %w", err)
	}
	return nil
}

// InTx begins a transaction, runs fn with it and commits, durably, if fn
// returns nil; otherwise it rolls back and returns fn's error unchanged.
// Errors of begin and commit are translated (a lost connection or a
// closed Store wraps registry.ErrUnavailable). ctx governs the whole
// transaction, fn included.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx registry.Tx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, o := ownedtx.Context(ctx)
	tx, err := s.db.BeginTx(octx, nil)
	if err != nil {
		return s.fail("in tx", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if err := fn(ctx, sqlTx{tx}); err != nil {
		return err
	}
	if err := ownedtx.Commit(tx, o); err != nil {
		return s.fail("in tx: commit", err)
	}
	return nil
}

// sealResponse returns the body to store for a response of the record
// with that scope and operation ID whose digest is digest, and the ID of
// the key that sealed it (nil: plaintext, when the Store has no Sealer).
func (s *Store) sealResponse(scope idem.ScopeHash, operationID string, digest, body []byte) (*string, []byte, error) {
	if body == nil {
		body = []byte{}
	}
	key, stored, err := registry.SealBody(s.sealer, body, registry.ResponseOf(scope, operationID, digest))
	if err == nil && key != nil {
		err = registry.CheckSealedResponse(stored)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("idemmysql: %w", err)
	}
	return key, stored, nil
}
