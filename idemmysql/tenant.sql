-- Named queries of the tenant fence and counts (migration 006,
-- registry/tenant.go), loaded by internal/sqlfile from tenant.go. $1 is
-- "now" as in queries.sql (NULL: database time).

-- name: FenceTenant
-- $2 tenant hash, $3 moved to. Idempotent: a second fence keeps its first
-- time and takes the new destination.
INSERT INTO idem_tenant_fences (tenant_hash, moved_to, fenced_at)
VALUES ($2, $3, coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))
ON DUPLICATE KEY UPDATE moved_to = VALUES(moved_to);

-- name: FenceWaitLock
-- Waits until every transaction that has touched idem_operations (or a
-- table its triggers use) has ended: each holds a shared metadata lock on
-- it until it commits or rolls back, and this write lock waits for all
-- of them. Released at once by FenceWaitUnlock.
LOCK TABLES idem_operations WRITE;

-- name: FenceWaitUnlock
UNLOCK TABLES;

-- name: UnfenceTenant
-- $1 tenant hash.
DELETE FROM idem_tenant_fences WHERE tenant_hash = $1;

-- name: TenantFenced
-- $1 tenant hash.
SELECT EXISTS (SELECT 1 FROM idem_tenant_fences WHERE tenant_hash = $1);

-- name: TenantInFlight
-- $2 tenant hash. One statement: the tenant's records (through
-- idem_operations_tenant), those in flight with a live lease, its UNKNOWN
-- ones and its tombstones, and the unattributed records of the registry.
SELECT count(*),
       coalesce(sum(o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL AND o.lease_until > clock.now), 0),
       coalesce(sum(o.state = 'UNKNOWN'), 0),
       coalesce(sum(o.retired_at IS NOT NULL), 0),
       (SELECT count(*) FROM idem_operations WHERE tenant_hash IS NULL)
FROM (SELECT coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) AS now) AS clock
JOIN idem_operations o ON o.tenant_hash = $2;

-- The copy (ExportTenant, ImportTenant). The Export queries take $1, the
-- tenant hash, and list the columns in the field order of the registry's
-- Tenant* row types (tenantstream.go). Times are Unix µs.

-- name: ExportRecords
SELECT scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
       writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
       resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations WHERE tenant_hash = $1
ORDER BY created_at, operation_id;

-- name: ExportEffects
SELECT x.operation_id, x.name, x.downstream_key, x.owner_gen, x.handle, x.result,
       x.created_at, x.updated_at, x.request, x.answer, x.request_key, x.answer_key
FROM idem_effects x JOIN idem_operations o ON o.operation_id = x.operation_id
WHERE o.tenant_hash = $1
ORDER BY x.operation_id, x.created_at, x.name;

-- name: ExportLookups
SELECT l.operation_id, l.effect, l.downstream_key, l.answer, l.handle, l.detail, l.actor, l.at
FROM idem_effect_lookups l JOIN idem_operations o ON o.operation_id = l.operation_id
WHERE o.tenant_hash = $1
ORDER BY l.seq;

-- name: ExportReconciliations
SELECT r.operation_id, r.outcome, r.method, r.actor, r.evidence, r.created_at
FROM idem_reconciliations r JOIN idem_operations o ON o.operation_id = r.operation_id
WHERE o.tenant_hash = $1
ORDER BY r.id;

-- name: ExportSettlements
SELECT p.operation_id, p.outcome, p.handle, p.evidence, p.requested_by, p.requested_at,
       p.approved_by, p.approved_at
FROM idem_pending_settlements p JOIN idem_operations o ON o.operation_id = p.operation_id
WHERE o.tenant_hash = $1
ORDER BY p.operation_id;

-- name: ExportOutbox
SELECT m.message_id, m.operation_id, m.topic, m.payload, m.payload_key, m.created_at,
       m.claimed_until, m.published_at, m.attempts, m.last_error, m.last_attempt_at, m.dead_at, m.trace_parent
FROM idem_outbox m JOIN idem_operations o ON o.operation_id = m.operation_id
WHERE o.tenant_hash = $1
ORDER BY m.seq;

-- name: ExportAudit
-- The audit entries about the tenant's operations (migration 003).
SELECT a.operation_id, a.at, a.actor, a.action, a.detail
FROM idem_audit a JOIN idem_operations o ON o.operation_id = a.operation_id
WHERE o.tenant_hash = $1
ORDER BY a.seq;

-- name: ImportRecord
-- The record as exported, every column; the storage rules (CHECKs) and
-- the tenant fence apply as to any insert.
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
       writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
       resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
        $9, $10, $11, $12, $13, $14,
        $15, $16, $17, $18, $19, $20,
        $21, $22, $23, $24);

-- name: ImportEffect
INSERT INTO idem_effects (operation_id, name, downstream_key, owner_gen, handle, result,
       created_at, updated_at, request, answer, request_key, answer_key)
VALUES ($1, $2, $3, $4, $5, $6,
        $7, $8, $9, $10, $11, $12);

-- name: ImportLookup
INSERT INTO idem_effect_lookups (operation_id, effect, downstream_key, answer, handle, detail, actor, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

-- name: ImportReconciliation
INSERT INTO idem_reconciliations (operation_id, outcome, method, actor, evidence, created_at)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: ImportSettlement
INSERT INTO idem_pending_settlements (operation_id, outcome, handle, evidence, requested_by, requested_at,
       approved_by, approved_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

-- name: ImportOutbox
INSERT INTO idem_outbox (message_id, operation_id, topic, payload, payload_key, created_at,
       claimed_until, published_at, attempts, last_error, last_attempt_at, dead_at, trace_parent)
VALUES ($1, $2, $3, $4, $5, $6,
        $7, $8, $9, $10, $11, $12, $13);

-- name: ImportAudit
INSERT INTO idem_audit (operation_id, at, actor, action, detail)
VALUES ($1, $2, $3, $4, $5);
