package idemmysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/idemkit/idem/registry"
)

// ClaimOutbox claims up to limit pending messages (neither published nor
// dead), oldest (lowest seq) first, whose previous claim or backoff is
// absent or expired, until now + lease (lease <= 0 means
// registry.DefaultLease), and returns them in seq order; limit <= 0
// returns nothing. One transaction picks them with FOR UPDATE SKIP LOCKED
// — relays claiming at once pass over each other's rows instead of
// waiting — sets their claim and reads them back. ctx governs the call.
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
		msgs = nil
		seqs, err := pickSeqs(ctx, tx, now, limit)
		if err != nil || len(seqs) == 0 {
			return err
		}
		list, err := json.Marshal(seqs)
		if err != nil {
			return err
		}
		if _, err := exec(ctx, tx, queries.Get("ClaimOutboxMark"), now, lease.Microseconds(), string(list)); err != nil {
			return err
		}
		rows, err := queryRows(ctx, tx, queries.Get("OutboxBySeqs"), string(list))
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
	return msgs, nil
}

// pickSeqs locks and returns the seqs of up to limit claimable messages.
func pickSeqs(ctx context.Context, tx *sql.Tx, now any, limit int) ([]int64, error) {
	rows, err := queryRows(ctx, tx, queries.Get("ClaimOutboxPick"), now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return seqs, rows.Close()
}

// MarkPublished records that the messages with these IDs were published
// (published_at = now), in one statement; IDs that are unknown or already
// published are ignored, so a relay may repeat the call. ctx governs the
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
		_, err := exec(ctx, tx, queries.Get("MarkPublished"), now, string(list))
		return err
	})
}

// scanOutbox scans the columns every query of outbox messages returns:
// seq, message_id, operation_id, topic, payload, created_at, attempts,
// last_error, last_attempt_at, dead_at, published_at, payload_key,
// trace_parent, and
// opens the payload (registry.OpenPayload).
func (s *Store) scanOutbox(row scanner) (registry.OutboxMessage, error) {
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
	if m.Payload == nil {
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
