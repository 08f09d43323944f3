-- Named queries of the tenant fence and counts (migration 020,
-- registry/tenant.go), loaded by internal/sqlfile from tenant.go. "now"
-- is as in queries.sql: NULL means database time.

-- name: FenceTenant
-- $1 tenant hash, $2 moved to, $3 now. Idempotent: a second fence keeps
-- its first time and takes the new destination.
INSERT INTO idem_tenant_fences (tenant_hash, moved_to, fenced_at)
VALUES ($1::bytea, $2::text, coalesce($3::timestamptz, statement_timestamp()))
ON CONFLICT (tenant_hash) DO UPDATE SET moved_to = EXCLUDED.moved_to;

-- name: NextXid
-- The transaction ID the next writing transaction will get: every
-- transaction that had written anything when this runs has a lower one.
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint;

-- name: WritersBefore
-- $1 a NextXid: whether a transaction with a lower ID is still running.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint < $1::bigint;

-- name: UnfenceTenant
-- $1 tenant hash.
DELETE FROM idem_tenant_fences WHERE tenant_hash = $1::bytea;

-- name: TenantFenced
-- $1 tenant hash.
SELECT EXISTS (SELECT 1 FROM idem_tenant_fences WHERE tenant_hash = $1::bytea);

-- name: TenantInFlight
-- $1 tenant hash, $2 now. One snapshot: the tenant's records (through
-- idem_operations_tenant), those in flight with a live lease, its UNKNOWN
-- ones and its tombstones, and the unattributed records of the registry.
WITH clock AS (SELECT coalesce($2::timestamptz, statement_timestamp()) AS t)
SELECT count(*),
       count(*) FILTER (WHERE o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL AND o.lease_until > clock.t),
       count(*) FILTER (WHERE o.state = 'UNKNOWN'),
       count(*) FILTER (WHERE o.retired_at IS NOT NULL),
       (SELECT count(*) FROM idem_operations WHERE tenant_hash IS NULL)
FROM clock JOIN idem_operations o ON o.tenant_hash = $1::bytea;

-- The copy (ExportTenant, ImportTenant). The Export queries take $1, the
-- tenant hash, and list the columns in the field order of the registry's
-- Tenant* row types (tenantstream.go), which the driver scans by position.

-- name: ExportRecords
SELECT scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
       writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
       resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations WHERE tenant_hash = $1::bytea
ORDER BY created_at, operation_id;

-- name: ExportEffects
SELECT x.operation_id, x.name, x.downstream_key, x.owner_gen, x.handle, x.result,
       x.created_at, x.updated_at, x.request, x.answer, x.request_key, x.answer_key
FROM idem_effects x JOIN idem_operations o ON o.operation_id = x.operation_id
WHERE o.tenant_hash = $1::bytea
ORDER BY x.operation_id, x.created_at, x.name;

-- name: ExportLookups
SELECT l.operation_id, l.effect, l.downstream_key, l.answer, l.handle, l.detail, l.actor, l.at
FROM idem_effect_lookups l JOIN idem_operations o ON o.operation_id = l.operation_id
WHERE o.tenant_hash = $1::bytea
ORDER BY l.seq;

-- name: ExportReconciliations
SELECT r.operation_id, r.outcome, r.method, r.actor, r.evidence, r.created_at
FROM idem_reconciliations r JOIN idem_operations o ON o.operation_id = r.operation_id
WHERE o.tenant_hash = $1::bytea
ORDER BY r.id;

-- name: ExportSettlements
SELECT p.operation_id, p.outcome, p.handle, p.evidence, p.requested_by, p.requested_at,
       p.approved_by, p.approved_at
FROM idem_pending_settlements p JOIN idem_operations o ON o.operation_id = p.operation_id
WHERE o.tenant_hash = $1::bytea
ORDER BY p.operation_id;

-- name: ExportOutbox
SELECT m.message_id, m.operation_id, m.topic, m.payload, m.payload_key, m.created_at,
       m.claimed_until, m.published_at, m.attempts, m.last_error, m.last_attempt_at, m.dead_at, m.trace_parent
FROM idem_outbox m JOIN idem_operations o ON o.operation_id = m.operation_id
WHERE o.tenant_hash = $1::bytea
ORDER BY m.seq;

-- name: ExportAudit
-- The audit entries about the tenant's operations (migration 014).
SELECT a.operation_id, a.at, a.actor, a.action, a.detail
FROM idem_audit a JOIN idem_operations o ON o.operation_id = a.operation_id
WHERE o.tenant_hash = $1::bytea
ORDER BY a.seq;

-- name: ImportRecord
-- The record as exported, every column; the storage rules (CHECKs) and
-- the tenant fence apply as to any insert.
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
       writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
       resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash)
VALUES ($1::bytea, $2::text, $3::text, $4::bytea, $5::bytea, $6::text, $7::text, $8::bigint,
        $9::bigint, $10::timestamptz, $11::timestamptz, $12::timestamptz, $13::timestamptz, $14::integer,
        $15::text, $16::text, $17::text, $18::bytea, $19::bytea, $20::text,
        $21::timestamptz, $22::timestamptz, $23::bigint, $24::bytea);

-- name: ImportEffect
INSERT INTO idem_effects (operation_id, name, downstream_key, owner_gen, handle, result,
       created_at, updated_at, request, answer, request_key, answer_key)
VALUES ($1::text, $2::text, $3::text, $4::bigint, $5::text, $6::text,
        $7::timestamptz, $8::timestamptz, $9::bytea, $10::bytea, $11::text, $12::text);

-- name: ImportLookup
INSERT INTO idem_effect_lookups (operation_id, effect, downstream_key, answer, handle, detail, actor, at)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::timestamptz);

-- name: ImportReconciliation
INSERT INTO idem_reconciliations (operation_id, outcome, method, actor, evidence, created_at)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::timestamptz);

-- name: ImportSettlement
INSERT INTO idem_pending_settlements (operation_id, outcome, handle, evidence, requested_by, requested_at,
       approved_by, approved_at)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::timestamptz, $7::text, $8::timestamptz);

-- name: ImportOutbox
INSERT INTO idem_outbox (message_id, operation_id, topic, payload, payload_key, created_at,
       claimed_until, published_at, attempts, last_error, last_attempt_at, dead_at, trace_parent)
VALUES ($1::text, $2::text, $3::text, $4::bytea, $5::text, $6::timestamptz,
        $7::timestamptz, $8::timestamptz, $9::integer, $10::text, $11::timestamptz, $12::timestamptz, $13::text);

-- name: ImportAudit
INSERT INTO idem_audit (operation_id, at, actor, action, detail)
VALUES ($1::text, $2::timestamptz, $3::text, $4::text, $5::text);
