package idemsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"time"

	"github.com/idemkit/idem/registry"
)

// ClaimOutbox claims up to limit unpublished messages, oldest (lowest
// seq) first, whose previous claim is absent or expired, until now +
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
	if lease <= 0 {
		lease = registry.DefaultLease
	}
	var msgs []registry.OutboxMessage
	err := s.writeTx(ctx, "claim outbox", func(tx *sql.Tx, now any) error {
		rows, err := s.txStmt(ctx, tx, "ClaimOutbox").QueryContext(ctx, now, limit, lease.Microseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m registry.OutboxMessage
			var created int64
			if err := rows.Scan(&m.Seq, &m.ID, &m.OperationID, &m.Topic, &m.Payload, &created); err != nil {
				return err
			}
			if m.Payload == nil { // the driver returns an empty BLOB as nil
				m.Payload = []byte{}
			}
			m.CreatedAt = fromMicros(created)
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
