-- Named queries of retention (SPEC E5, migration 004), loaded by
-- internal/sqlfile from retention.go. Store.Prune runs them in one BEGIN
-- IMMEDIATE transaction: SQLite's single writer is what FOR UPDATE SKIP
-- LOCKED is on PostgreSQL, so concurrent prunes and retries see a record
-- either before or after a prune, never half-way. Every statement takes
-- the same "now" ($1, microseconds), read once by PruneNow.

-- name: PruneNow
-- $1 the injected now, or NULL for database time.
SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER));

-- name: PruneRetire
-- $1 now, $2 limit. Retires up to $2 terminal records whose expiry has
-- come, oldest expiry first: the whole response dropped, retired_at and
-- tombstone_until (NULL when tombstone_ttl is NULL: kept forever) set.
-- The triggers of migration 004 check that nothing else changes. The
-- inner WHERE repeats idem_operations_retire's terms so SQLite uses it.
UPDATE idem_operations
SET retired_at = $1, tombstone_until = $1 + tombstone_ttl,
    resp_status = NULL, resp_media_type = NULL, resp_location = NULL,
    resp_etag = NULL, resp_body = NULL, resp_digest = NULL, resp_key = NULL,
    updated_at = $1
WHERE scope IN (SELECT o.scope FROM idem_operations AS o
                WHERE o.retired_at IS NULL AND o.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
                  AND o.expires_at <= $1
                ORDER BY o.expires_at
                LIMIT $2);

-- name: PruneRetireAbandoned
-- $1 now, $2 limit. Retires up to $2 abandoned reservations (migration
-- 011): RESERVED or EXECUTING, no effect attempt recorded, lease expired a
-- full retention (expires_at - created_at, unchanged until settlement)
-- ago; state kept, retired_at and tombstone_until set as by PruneRetire.
-- The trigger idem_operations_retire_abandoned_only checks exactly that.
-- In PruneRetire's write transaction, so no takeover runs in between. The
-- inner WHERE repeats idem_operations_lease's terms so SQLite uses it.
UPDATE idem_operations
SET retired_at = $1, tombstone_until = $1 + tombstone_ttl, updated_at = $1
WHERE scope IN (SELECT o.scope FROM idem_operations AS o
                WHERE o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL
                  AND o.lease_until <= $1 AND o.lease_until + (o.expires_at - o.created_at) <= $1
                  AND NOT EXISTS (SELECT 1 FROM idem_effects AS x WHERE x.operation_id = o.operation_id)
                ORDER BY o.lease_until
                LIMIT $2);

-- name: PruneDelete
-- $1 now, $2 limit. Deletes up to $2 tombstones whose deletion time has
-- come, earliest first, and returns their operation IDs. A record retired
-- by PruneRetire at the same $1 has tombstone_until > $1 (its TTL is at
-- least 1 µs), so it is not deleted in the same call.
DELETE FROM idem_operations
WHERE scope IN (SELECT o.scope FROM idem_operations AS o
                WHERE o.tombstone_until IS NOT NULL AND o.tombstone_until <= $1
                ORDER BY o.tombstone_until
                LIMIT $2)
RETURNING operation_id;

-- name: PruneDeleteOutbox
-- $1 JSON array of the deleted operations' IDs. Published messages only:
-- unpublished ones stay for the relay, which does not need the record.
DELETE FROM idem_outbox
WHERE published_at IS NOT NULL AND operation_id IN (SELECT value FROM json_each($1));

-- name: PruneDeleteEffects
-- $1 JSON array of the deleted operations' IDs (idem_effects, migration 005).
DELETE FROM idem_effects WHERE operation_id IN (SELECT value FROM json_each($1));

-- name: PruneDeleteReconciliations
-- $1 JSON array of the deleted operations' IDs (idem_reconciliations,
-- migration 005).
DELETE FROM idem_reconciliations WHERE operation_id IN (SELECT value FROM json_each($1));

-- name: PruneDeleteLookups
-- $1 JSON array of the deleted operations' IDs (idem_effect_lookups,
-- migration 013).
DELETE FROM idem_effect_lookups WHERE operation_id IN (SELECT value FROM json_each($1));

-- name: PruneDeletePending
-- $1 JSON array of the deleted operations' IDs (idem_pending_settlements,
-- migration 013).
DELETE FROM idem_pending_settlements WHERE operation_id IN (SELECT value FROM json_each($1));

-- name: PruneDeleteRecoveryAttempts
-- $1 JSON array of the deleted operations' IDs (idem_recovery_attempts,
-- migration 019: left when the worker that wrote it stopped before the
-- operation was settled).
DELETE FROM idem_recovery_attempts WHERE operation_id IN (SELECT value FROM json_each($1));
