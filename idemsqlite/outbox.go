package idemsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed outbox.sql
var outboxFiles embed.FS

// outboxQueries are the named queries of outbox delivery (outbox.sql).
var outboxQueries = sqlfile.MustLoad(outboxFiles, "outbox.sql")

// ClaimOutbox claims up to limit pending messages (neither published nor
// dead), oldest (lowest seq) first, whose previous claim or backoff is
// absent or expired, until now +
// lease (lease <= 0 means registry.DefaultLease), and returns them in seq
// order; limit <= 0 returns nothing. It runs in a BEGIN IMMEDIATE
// transaction: SQLite's single writer keeps concurrent relays from
// claiming the same message while its claim lasts, as FOR UPDATE SKIP
// LOCKED does on PostgreSQL. ctx governs the call.
func (s *Store) ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]registry.OutboxMessage, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	lease = registry.LeaseOrDefault(lease)
	var msgs []registry.OutboxMessage
	err := s.writeTx(ctx, "claim outbox", func(tx *sql.Tx, now any) error {
		rows, err := s.txStmt(ctx, tx, "ClaimOutbox").QueryContext(ctx, now, limit, lease.Microseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			m, err := s.scanOutbox(rows)
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(msgs, func(a, b registry.OutboxMessage) int { return cmp.Compare(a.Seq, b.Seq) })
	return msgs, nil
}

// MarkPublished records that the messages with these IDs were published
// (published_at = now), in one statement; IDs that are unknown or already
// published are ignored, so a relay may repeat the call. It runs in a
// write transaction, queued with the others (see Open). ctx governs the
// call.
func (s *Store) MarkPublished(ctx context.Context, ids []string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return s.fail("mark published", err)
	}
	return s.writeTx(ctx, "mark published", func(tx *sql.Tx, now any) error {
		_, err := s.txStmt(ctx, tx, "MarkPublished").ExecContext(ctx, now, string(list))
		return err
	})
}

// scanOutbox scans the columns every query of outbox messages returns:
// seq, message_id, operation_id, topic, payload, created_at, attempts,
// last_error, last_attempt_at, dead_at, published_at, payload_key,
// trace_parent, and
// opens the payload (registry.OpenPayload).
func (s *Store) scanOutbox(row interface{ Scan(...any) error }) (registry.OutboxMessage, error) {
	var (
		m           registry.OutboxMessage
		created     int64
		lastError   sql.NullString
		lastAttempt sql.NullInt64
		deadAt      sql.NullInt64
		publishedAt sql.NullInt64
		payloadKey  sql.NullString
		trace       sql.NullString
	)
	dest := []any{&m.Seq, &m.ID, &m.OperationID, &m.Topic, &m.Payload, &created, &m.Attempts, &lastError, &lastAttempt, &deadAt, &publishedAt, &payloadKey, &trace}
	if err := row.Scan(dest...); err != nil {
		return m, err
	}
	if m.Payload == nil { // the driver returns an empty BLOB as nil
		m.Payload = []byte{}
	}
	m.CreatedAt = fromMicros(created)
	m.LastError, m.Trace = lastError.String, trace.String
	if lastAttempt.Valid {
		m.LastAttemptAt = fromMicros(lastAttempt.Int64)
	}
	if deadAt.Valid {
		m.DeadAt = fromMicros(deadAt.Int64)
	}
	if publishedAt.Valid {
		m.PublishedAt = fromMicros(publishedAt.Int64)
	}
	registry.OpenPayload(s.sealer, nullable(payloadKey), &m)
	return m, nil
}

// FailOutbox records a failed delivery attempt; see
// registry.OutboxDelivery. It is one compare-and-set statement in a write
// transaction. ctx governs the call.
func (s *Store) FailOutbox(ctx context.Context, f registry.OutboxFailure) error {
	dead := 0
	if f.Dead {
		dead = 1
	}
	return s.writeTx(ctx, "fail outbox", func(tx *sql.Tx, now any) error {
		res, err := tx.ExecContext(ctx, outboxQueries.Get("FailOutbox"), now, f.ID, f.Attempts, f.Error, max(f.RetryAfter, 0).Microseconds(), dead)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, fmt.Errorf("%s: %w", f.ID, registry.ErrFenced))
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
	return s.readOutbox(ctx, "dead letters", outboxQueries.Get("DeadLetters"), limit)
}

// readOutbox runs a query of outbox messages (scanOutbox's columns) and
// reads them all. op names the call in errors.
func (s *Store) readOutbox(ctx context.Context, op string, query string, args ...any) ([]registry.OutboxMessage, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
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
// when it changes nothing a query in the same transaction tells
// ErrNotFound from ErrFenced. ctx governs the call.
func (s *Store) RequeueOutbox(ctx context.Context, id string) error {
	return s.writeTx(ctx, "requeue outbox", func(tx *sql.Tx, _ any) error {
		res, err := tx.ExecContext(ctx, outboxQueries.Get("RequeueOutbox"), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var exists bool
		if err := tx.QueryRowContext(ctx, outboxQueries.Get("OutboxExists"), id).Scan(&exists); err != nil {
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
	if err := s.db.QueryRowContext(ctx, outboxQueries.Get("OutboxStats")).Scan(&st.Pending, &oldest, &st.Dead); err != nil {
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
	return s.readOutbox(ctx, "operation outbox", outboxQueries.Get("OperationOutbox"), operationID)
}
