package idemmysql

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed delivery.sql
var deliveryFiles embed.FS

// deliveryQueries are the named queries of delivery.sql.
var deliveryQueries = sqlfile.MustLoad(deliveryFiles, "delivery.sql")

var (
	_ registry.LeaseScanner   = (*Store)(nil)
	_ registry.OutboxDelivery = (*Store)(nil)
)

// ExpiredLeases returns up to limit EXECUTING records whose lease has
// expired at the store's "now", oldest lease first; see
// registry.LeaseScanner. One statement: a consistent read that locks
// nothing, TakeOver being the arbiter. ctx governs the query.
func (s *Store) ExpiredLeases(ctx context.Context, limit int) ([]registry.Record, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	rows, err := queryRows(ctx, s.db, deliveryQueries.Get("ExpiredLeases"), s.nowParam(), limit)
	if err != nil {
		return nil, s.fail("expired leases", err)
	}
	recs, err := s.scanRecords(rows)
	if err != nil {
		return nil, s.fail("expired leases", err)
	}
	return recs, nil
}

// ExtendLease moves the lease of an in-flight record still at
// rec.OwnerGen to now + lease (lease <= 0: registry.DefaultLease) and
// returns the new end; registry.ErrFenced otherwise. ctx governs the call.
func (s *Store) ExtendLease(ctx context.Context, rec registry.Record, lease time.Duration) (time.Time, error) {
	lease = registry.LeaseOrDefault(lease)
	var until int64
	err := s.writeTx(ctx, "extend lease", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, deliveryQueries.Get("ExtendLease"), now, rec.Scope[:], rec.OperationID, rec.OwnerGen, lease.Microseconds())
		if err != nil {
			return err
		}
		if n == 0 {
			return registry.ErrFenced
		}
		return queryRow(ctx, tx, deliveryQueries.Get("LeaseUntil"), rec.Scope[:]).Scan(&until)
	})
	if err != nil {
		return time.Time{}, err
	}
	return fromMicros(until), nil
}

// FailOutbox records a failed delivery attempt; see
// registry.OutboxDelivery. It is one compare-and-set statement (on the
// attempt count the relay saw). ctx governs the call.
func (s *Store) FailOutbox(ctx context.Context, f registry.OutboxFailure) error {
	dead := 0
	if f.Dead {
		dead = 1
	}
	return s.writeTx(ctx, "fail outbox", func(tx *sql.Tx, now any) error {
		n, err := exec(ctx, tx, deliveryQueries.Get("FailOutbox"), now, f.ID, f.Attempts, f.Error, max(f.RetryAfter, 0).Microseconds(), dead)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", f.ID, registry.ErrFenced)
		}
		return nil
	})
}

// DeadLetters returns up to limit dead letters, oldest first; see
// registry.OutboxDelivery. ctx governs the query.
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]registry.OutboxMessage, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	return s.readOutbox(ctx, "dead letters", deliveryQueries.Get("DeadLetters"), limit)
}

// readOutbox runs a query of outbox messages (scanOutbox's columns) and
// reads them all. op names the call in errors.
func (s *Store) readOutbox(ctx context.Context, op string, query string, args ...any) ([]registry.OutboxMessage, error) {
	rows, err := queryRows(ctx, s.db, query, args...)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	var msgs []registry.OutboxMessage
	for rows.Next() {
		m, err := s.scanOutbox(rows)
		if err != nil {
			return nil, s.fail(op, err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return msgs, nil
}

// RequeueOutbox makes a dead letter pending again; see
// registry.OutboxDelivery. The change is one compare-and-set statement;
// when it matches nothing a query in the same transaction tells
// ErrNotFound from ErrFenced. ctx governs the call.
func (s *Store) RequeueOutbox(ctx context.Context, id string) error {
	return s.writeTx(ctx, "requeue outbox", func(tx *sql.Tx, _ any) error {
		n, err := exec(ctx, tx, deliveryQueries.Get("RequeueOutbox"), id)
		if err != nil || n == 1 {
			return err
		}
		var exists bool
		if err := queryRow(ctx, tx, deliveryQueries.Get("OutboxExists"), id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("%s: %w", id, registry.ErrNotFound)
		}
		return fmt.Errorf("%s: not a dead letter: %w", id, registry.ErrFenced)
	})
}

// OutboxStats counts the pending and dead messages; see
// registry.OutboxDelivery. ctx governs the query.
func (s *Store) OutboxStats(ctx context.Context) (registry.OutboxStats, error) {
	var (
		st     registry.OutboxStats
		oldest sql.NullInt64
	)
	if err := s.checkOpen(); err != nil {
		return st, err
	}
	if err := queryRow(ctx, s.db, deliveryQueries.Get("OutboxStats")).Scan(&st.Pending, &oldest, &st.Dead); err != nil {
		return st, s.fail("outbox stats", err)
	}
	if oldest.Valid {
		st.OldestPending = fromMicros(oldest.Int64)
	}
	return st, nil
}

// OperationOutbox returns an operation's messages with their delivery
// state, oldest first; see registry.OutboxDelivery. ctx governs the
// query.
func (s *Store) OperationOutbox(ctx context.Context, operationID string) ([]registry.OutboxMessage, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.readOutbox(ctx, "operation outbox", deliveryQueries.Get("OperationOutbox"), operationID)
}
