-- Named queries of outbox delivery (SPEC E4, migration 007), loaded by
-- internal/sqlfile from outbox.go. Conventions as in queries.sql: "now" is
-- one parameter, NULL meaning database time (Unix µs), read once per
-- statement.

-- name: FailOutbox
-- $1 now, $2 message ID, $3 expected attempts, $4 error, $5 backoff µs,
-- $6 dead (0 or 1). The compare-and-set of a failed attempt: only a
-- pending message still at the attempt count it was claimed with changes.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_outbox
SET attempts = attempts + 1,
    last_error = $4,
    last_attempt_at = clock.now,
    claimed_until = CASE WHEN $6 THEN NULL ELSE clock.now + $5 END,
    dead_at = CASE WHEN $6 THEN clock.now END
FROM clock
WHERE message_id = $2 AND attempts = $3 AND published_at IS NULL AND dead_at IS NULL;

-- name: DeadLetters
-- $1 limit.
SELECT seq, message_id, operation_id, topic, payload, created_at,
       attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent
FROM idem_outbox
WHERE published_at IS NULL AND dead_at IS NOT NULL
ORDER BY seq
LIMIT $1;

-- name: RequeueOutbox
-- $1 message ID. The compare-and-set of a requeue: only a dead letter
-- changes.
UPDATE idem_outbox
SET attempts = 0, claimed_until = NULL, dead_at = NULL
WHERE message_id = $1 AND published_at IS NULL AND dead_at IS NOT NULL;

-- name: OutboxExists
-- $1 message ID.
SELECT EXISTS (SELECT 1 FROM idem_outbox WHERE message_id = $1);

-- name: OutboxStats
-- Each part's predicate is exactly that of a partial index (migration
-- 007), so a scrape reads only the undelivered rows however many
-- delivered ones the table keeps.
SELECT (SELECT count(*) FROM idem_outbox WHERE published_at IS NULL AND dead_at IS NULL),
       (SELECT min(created_at) FROM idem_outbox WHERE published_at IS NULL AND dead_at IS NULL),
       (SELECT count(*) FROM idem_outbox WHERE published_at IS NULL AND dead_at IS NOT NULL);

-- name: OperationOutbox
-- $1 operation ID: its messages in the order its outcome wrote them, with
-- their delivery state (served by idem_outbox_operation, migration 004).
SELECT seq, message_id, operation_id, topic, payload, created_at,
       attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent
FROM idem_outbox
WHERE operation_id = $1
ORDER BY seq;
