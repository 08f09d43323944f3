package idempg

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/registry"
)

// ClaimOutbox claims up to limit unpublished messages, oldest (lowest Seq)
// first, whose previous claim, if any, has expired, and holds them for
// lease (0 or less means registry.DefaultLease). Concurrent callers get
// disjoint messages (FOR UPDATE SKIP LOCKED). limit <= 0 claims nothing.
// ctx governs the statement.
func (s *Store) ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]registry.OutboxMessage, error) {
	if limit <= 0 {
		return nil, nil
	}
	if lease <= 0 {
		lease = registry.DefaultLease
	}
	now, _ := s.clock()
	rows, err := s.pool.Query(ctx, queries.Get("ClaimOutbox"), limit, micros(lease), now)
	if err != nil {
		return nil, fmt.Errorf("idempg: claim outbox: %w", translate(err))
	}
	defer rows.Close()
	var msgs []registry.OutboxMessage
	for rows.Next() {
		var m registry.OutboxMessage
		if err := rows.Scan(&m.Seq, &m.ID, &m.OperationID, &m.Topic, &m.Payload, &m.CreatedAt); err != nil {
			return nil, fmt.Errorf("idempg: claim outbox: %w", translate(err))
		}
		m.CreatedAt = m.CreatedAt.UTC()
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
