-- Named queries of outbox delivery (SPEC E4, migration 008), loaded by
-- internal/sqlfile from outbox.go. Conventions as in queries.sql: "now" is
-- one parameter, NULL meaning database time, read once per statement.

-- name: FailOutbox
-- $1 message ID, $2 expected attempts, $3 error, $4 backoff µs, $5 dead,
-- $6 now. The compare-and-set of a failed attempt: only a pending message
-- still at the attempt count it was claimed with changes.
WITH clock AS (SELECT coalesce($6::timestamptz, statement_timestamp()) AS t)
UPDATE idem_outbox
SET attempts = attempts + 1,
    last_error = $3,
    last_attempt_at = clock.t,
    claimed_until = CASE WHEN $5::boolean THEN NULL
                         ELSE clock.t + $4::bigint * interval '1 microsecond' END,
    dead_at = CASE WHEN $5::boolean THEN clock.t END
FROM clock
WHERE message_id = $1 AND attempts = $2 AND published_at IS NULL AND dead_at IS NULL;

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
-- 008), so a scrape reads only the undelivered rows however many
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
