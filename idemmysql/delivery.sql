-- Named queries of lease scanning and outbox delivery, loaded by
-- internal/sqlfile from recovery.go and delivery.go. $1 is "now" as in
-- queries.sql.

-- name: ExpiredLeases
-- In-flight records whose lease has expired, oldest lease first. It locks
-- nothing: the worker's TakeOver is the arbiter.
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations
WHERE state = 'EXECUTING'
  AND lease_until <= coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
  AND retired_at IS NULL
ORDER BY lease_until, operation_id
LIMIT $2;

-- name: ExtendLease
-- The heartbeat: a compare-and-set on the owner generation and an
-- in-flight state.
UPDATE idem_operations
SET lease_until = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) + $5,
    updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE scope = $2 AND operation_id = $3 AND owner_gen = $4 AND state IN ('RESERVED', 'EXECUTING')
  AND retired_at IS NULL;

-- name: LeaseUntil
SELECT lease_until FROM idem_operations WHERE scope = $1;

-- name: FailOutbox
-- A failed attempt, fenced by the attempt count the relay saw ($3); $6
-- (0 or 1) makes the message a dead letter. MySQL evaluates SET left to
-- right: claimed_until and dead_at read $6, not the updated columns.
UPDATE idem_outbox
SET claimed_until = CASE WHEN $6 = 1 THEN NULL ELSE coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) + $5 END,
    dead_at = CASE WHEN $6 = 1 THEN coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) END,
    attempts = attempts + 1,
    last_error = $4,
    last_attempt_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE message_id = $2 AND attempts = $3 AND published_at IS NULL AND dead_at IS NULL;

-- name: DeadLetters
SELECT seq, message_id, operation_id, topic, payload, created_at,
       attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent
FROM idem_outbox
WHERE published_at IS NULL AND dead_at IS NOT NULL
ORDER BY seq
LIMIT $1;

-- name: RequeueOutbox
UPDATE idem_outbox
SET attempts = 0, claimed_until = NULL, dead_at = NULL
WHERE message_id = $1 AND published_at IS NULL AND dead_at IS NOT NULL;

-- name: OutboxExists
SELECT EXISTS (SELECT 1 FROM idem_outbox WHERE message_id = $1);

-- name: OutboxStats
SELECT (SELECT count(*) FROM idem_outbox WHERE published_at IS NULL AND dead_at IS NULL),
       (SELECT min(created_at) FROM idem_outbox WHERE published_at IS NULL AND dead_at IS NULL),
       (SELECT count(*) FROM idem_outbox WHERE published_at IS NULL AND dead_at IS NOT NULL);

-- name: OperationOutbox
SELECT seq, message_id, operation_id, topic, payload, created_at,
       attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent
FROM idem_outbox
WHERE operation_id = $1
ORDER BY seq;
