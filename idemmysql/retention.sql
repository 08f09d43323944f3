-- Named queries of retention (Prune), loaded by internal/sqlfile from
-- retention.go. $1 is the pass's "now" (read once with Now, audit.sql),
-- $2 the batch limit. Single-table UPDATE and DELETE take ORDER BY and
-- LIMIT in MySQL; a subquery with LIMIT inside IN is not allowed.

-- name: PruneRetire
-- Terminal records past retention become tombstones: the response is
-- dropped, the key kept (the trigger allows nothing else).
UPDATE idem_operations
SET retired_at = $1, tombstone_until = $1 + tombstone_ttl,
    resp_status = NULL, resp_media_type = NULL, resp_location = NULL,
    resp_etag = NULL, resp_body = NULL, resp_digest = NULL, resp_key = NULL,
    updated_at = $1
WHERE retired_at IS NULL AND state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
  AND expires_at <= $1
ORDER BY expires_at
LIMIT $2;

-- name: PruneRetireAbandoned
-- Reservations abandoned past their lease and retention, that began no
-- effect, become tombstones too.
UPDATE idem_operations
SET retired_at = $1, tombstone_until = $1 + tombstone_ttl, updated_at = $1
WHERE state IN ('RESERVED', 'EXECUTING') AND retired_at IS NULL
  AND lease_until <= $1 AND lease_until + (expires_at - created_at) <= $1
  AND NOT EXISTS (SELECT 1 FROM idem_effects AS x WHERE x.operation_id = idem_operations.operation_id)
ORDER BY lease_until
LIMIT $2;

-- name: PruneExpiredTombstones
-- The tombstones whose TTL has passed, locked for the delete.
SELECT operation_id FROM idem_operations
WHERE tombstone_until IS NOT NULL AND tombstone_until <= $1
ORDER BY tombstone_until
LIMIT $2
FOR UPDATE;

-- name: PruneDelete
-- $1 is a JSON array of operation IDs (PruneExpiredTombstones).
DELETE FROM idem_operations
WHERE operation_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(64) CHARACTER SET ascii PATH '$')) AS j)
  AND tombstone_until IS NOT NULL;

-- name: PruneDeleteOutbox
DELETE FROM idem_outbox
WHERE published_at IS NOT NULL
  AND operation_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(64) CHARACTER SET ascii PATH '$')) AS j);

-- name: PruneDeleteEffects
DELETE FROM idem_effects
WHERE operation_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(64) CHARACTER SET ascii PATH '$')) AS j);

-- name: PruneDeleteReconciliations
DELETE FROM idem_reconciliations
WHERE operation_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(64) CHARACTER SET ascii PATH '$')) AS j);

-- name: PruneDeleteLookups
DELETE FROM idem_effect_lookups
WHERE operation_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(64) CHARACTER SET ascii PATH '$')) AS j);

-- name: PruneDeletePending
DELETE FROM idem_pending_settlements
WHERE operation_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(64) CHARACTER SET ascii PATH '$')) AS j);

-- name: PruneDeleteRecoveryAttempts
-- idem_recovery_attempts (migration 010): left when the worker that
-- wrote it stopped before the operation was settled.
DELETE FROM idem_recovery_attempts
WHERE operation_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(64) CHARACTER SET ascii PATH '$')) AS j);
