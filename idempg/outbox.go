package idempg

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed outbox.sql
var outboxFS embed.FS

// outboxQueries are the named queries of outbox delivery (outbox.sql).
var outboxQueries = sqlfile.MustLoad(outboxFS, "outbox.sql")

// ClaimOutbox claims up to limit pending messages (neither published nor
// dead), oldest (lowest Seq) first, whose previous claim or backoff, if
// any, has expired, and holds them for
// lease (0 or less means registry.DefaultLease). Concurrent callers get
// disjoint messages (FOR UPDATE SKIP LOCKED). limit <= 0 claims nothing.
// ctx governs the statement.
func (s *Store) ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]registry.OutboxMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	lease = registry.LeaseOrDefault(lease)
	now, _ := s.clock()
	rows, err := s.pool.Query(ctx, queries.Get("ClaimOutbox"), limit, micros(lease), now)
	if err != nil {
		return nil, fmt.Errorf("idempg: claim outbox: %w", translate(err))
	}
	defer rows.Close()
	var msgs []registry.OutboxMessage
	for rows.Next() {
		m, err := s.scanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("idempg: claim outbox: %w", translate(err))
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idempg: claim outbox: %w", translate(err))
	}
	return msgs, nil
}

// MarkPublished records the messages with those IDs as published, so they
// are never claimed again. Unknown or already published IDs are ignored;
// no IDs is a no-op. ctx governs the statement.
func (s *Store) MarkPublished(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	now, _ := s.clock()
	if _, err := s.pool.Exec(ctx, queries.Get("MarkPublished"), ids, now); err != nil {
		return fmt.Errorf("idempg: mark published: %w", translate(err))
	}
	return nil
}

// scanOutbox scans the columns every query of outbox messages returns:
// seq, message_id, operation_id, topic, payload, created_at, attempts,
// last_error, last_attempt_at, dead_at, published_at, payload_key,
// trace_parent, and
// opens the payload (registry.OpenPayload).
func (s *Store) scanOutbox(row interface{ Scan(...any) error }) (registry.OutboxMessage, error) {
	var (
		m           registry.OutboxMessage
		lastError   *string
		lastAttempt *time.Time
		deadAt      *time.Time
		publishedAt *time.Time
		payloadKey  *string
		trace       *string
	)
	dest := []any{&m.Seq, &m.ID, &m.OperationID, &m.Topic, &m.Payload, &m.CreatedAt, &m.Attempts, &lastError, &lastAttempt, &deadAt, &publishedAt, &payloadKey, &trace}
	if err := row.Scan(dest...); err != nil {
		return m, err
	}
	m.CreatedAt = m.CreatedAt.UTC()
	if lastError != nil {
		m.LastError = *lastError
	}
	if lastAttempt != nil {
		m.LastAttemptAt = lastAttempt.UTC()
	}
	if deadAt != nil {
		m.DeadAt = deadAt.UTC()
	}
	if publishedAt != nil {
		m.PublishedAt = publishedAt.UTC()
	}
	if trace != nil {
		m.Trace = *trace
	}
	registry.OpenPayload(s.sealer, payloadKey, &m)
	return m, nil
}

// FailOutbox records a failed delivery attempt; see
// registry.OutboxDelivery. It is one compare-and-set statement. ctx
// governs it.
func (s *Store) FailOutbox(ctx context.Context, f registry.OutboxFailure) error {
	now, _ := s.clock()
	tag, err := s.pool.Exec(ctx, outboxQueries.Get("FailOutbox"), f.ID, f.Attempts, f.Error, micros(max(f.RetryAfter, 0)), f.Dead, now)
	if err != nil {
		return fmt.Errorf("idempg: fail outbox: %w", translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idempg: fail outbox %s: %w", f.ID, registry.ErrFenced)
	}
	return nil
}

// DeadLetters returns up to limit dead letters, oldest first; see
// registry.OutboxDelivery. ctx governs the query.
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]registry.OutboxMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, outboxQueries.Get("DeadLetters"), limit)
	if err != nil {
		return nil, fmt.Errorf("idempg: dead letters: %w", translate(err))
	}
	defer rows.Close()
	var msgs []registry.OutboxMessage
	for rows.Next() {
		m, err := s.scanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("idempg: dead letters: %w", translate(err))
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idempg: dead letters: %w", translate(err))
	}
	return msgs, nil
}

// RequeueOutbox makes a dead letter pending again; see
// registry.OutboxDelivery. The change is one compare-and-set statement;
// when it changes nothing a second query tells ErrNotFound from
// ErrFenced. ctx governs both.
func (s *Store) RequeueOutbox(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, outboxQueries.Get("RequeueOutbox"), id)
	if err != nil {
		return fmt.Errorf("idempg: requeue outbox: %w", translate(err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, outboxQueries.Get("OutboxExists"), id).Scan(&exists); err != nil {
		return fmt.Errorf("idempg: requeue outbox: %w", translate(err))
	}
	if !exists {
		return fmt.Errorf("idempg: requeue outbox %s: %w", id, registry.ErrNotFound)
	}
	return fmt.Errorf("idempg: requeue outbox %s: not a dead letter: %w", id, registry.ErrFenced)
}

// OutboxStats counts the pending and dead messages; see
// registry.OutboxDelivery. ctx governs the query.
func (s *Store) OutboxStats(ctx context.Context) (registry.OutboxStats, error) {
	var (
		st     registry.OutboxStats
		oldest *time.Time
	)
	if err := s.pool.QueryRow(ctx, outboxQueries.Get("OutboxStats")).Scan(&st.Pending, &oldest, &st.Dead); err != nil {
		return st, fmt.Errorf("idempg: outbox stats: %w", translate(err))
	}
	if oldest != nil {
		st.OldestPending = oldest.UTC()
	}
	return st, nil
}

// OperationOutbox returns an operation's messages with their delivery
// state, oldest first; see registry.OutboxDelivery. ctx governs the
// query.
func (s *Store) OperationOutbox(ctx context.Context, operationID string) ([]registry.OutboxMessage, error) {
	rows, err := s.pool.Query(ctx, outboxQueries.Get("OperationOutbox"), operationID)
	if err != nil {
		return nil, fmt.Errorf("idempg: operation outbox: %w", translate(err))
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.OutboxMessage, error) {
		return s.scanOutbox(row)
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: operation outbox: %w", translate(err))
	}
	return msgs, nil
}
