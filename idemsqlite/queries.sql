-- Named queries of the SQLite driver, loaded with internal/sqlfile.
--
-- Parameters are $1, $2 … (modernc.org/sqlite binds $N to the N-th
-- argument, and a repeated $N to the same one). Times are INTEGER
-- microseconds since the Unix epoch. Every statement that needs "now"
-- takes it as $1: NULL means database time, which the clock CTE reads once
-- per statement, so every column a statement writes sees the same instant.
--
-- Record column order (scanRecord in record.go depends on it):
--   scope, operation_id, operation, owner, fingerprint, contract, state,
--   owner_gen, writer_epoch, lease_until, expires_at, created_at,
--   updated_at, resp_status, resp_media_type, resp_location, resp_etag,
--   resp_body, resp_digest, resp_key, retired_at, tombstone_until,
--   tombstone_ttl, tenant_hash (resp_key: migration 009; retired_at,
--   tombstone_until and tombstone_ttl: 004; tenant_hash: 015)

-- name: CreateMigrationsTable
CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    TEXT    PRIMARY KEY,
    applied_at INTEGER NOT NULL
) STRICT;

-- name: MigrationApplied
SELECT count(*) FROM idem_schema_migrations WHERE version = $1;

-- name: RecordMigration
INSERT INTO idem_schema_migrations (version, applied_at)
VALUES ($2, coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)));

-- name: ReserveInsert
-- Insert-or-nothing: no row back means the scope exists. Run inside a
-- BEGIN IMMEDIATE transaction, so the existing row cannot vanish before
-- the following GetByScope in the same transaction. The WHERE clause (the
-- writer fence: $8, the claim's epoch, older than idem_control's inserts
-- nothing) also keeps SQLite from reading ON CONFLICT as a join
-- constraint of the SELECT. $11 is the tombstone TTL in µs, NULL to keep
-- the tombstone forever (migration 004); $12 the tenant hash
-- (registry.TenantHash; migration 015).
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
                             owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                             tombstone_ttl, tenant_hash)
SELECT $2, $3, $4, $5, $6, $7, 'RESERVED', 1, $8, now + $9, now + $10, now, now, $11, $12 FROM clock
WHERE $8 >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
ON CONFLICT (scope) DO NOTHING
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state,
          owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
          resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: ClaimInsert
-- The in-transaction claim: a plain INSERT, so a duplicate fails with a
-- unique violation inside the caller's transaction.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
                             owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                             tombstone_ttl, tenant_hash)
SELECT $2, $3, $4, $5, $6, $7, 'RESERVED', 1, $8, now + $9, now + $10, now, now, $11, $12 FROM clock
WHERE $8 >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state,
          owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
          resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: ReserveInsertLimited
-- ReserveInsert with Claim.MaxActive: $13 is MaxActive (> 0). The row is
-- inserted only while the owner holds fewer than $13 active records of
-- the operation — UNKNOWN ones, and RESERVED or EXECUTING ones whose
-- lease has not expired (an abandoned reservation stops counting when its
-- lease expires; migration 011) — (idem_operations_inflight,
-- migration 008; the LIMIT stops the count at $13). Inside BEGIN IMMEDIATE the
-- count is exact. No row back: the scope exists or the limit held (the
-- caller's GetByScope in the same transaction tells which). The WHERE
-- clause already keeps ON CONFLICT from being read as a join constraint.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
                             owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                             tombstone_ttl, tenant_hash)
SELECT $2, $3, $4, $5, $6, $7, 'RESERVED', 1, $8, now + $9, now + $10, now, now, $11, $12 FROM clock
WHERE $8 >= (SELECT writer_epoch FROM idem_control WHERE id = 1)
  AND (SELECT count(*) FROM (SELECT 1 FROM idem_operations
                             WHERE owner = $5 AND operation = $4 AND state IN ('RESERVED', 'EXECUTING', 'UNKNOWN')
                               AND (state = 'UNKNOWN' OR lease_until > now)
                             LIMIT $13)) < $13
ON CONFLICT (scope) DO NOTHING
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state,
          owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
          resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: ClaimInsertLimited
-- ClaimInsert with Claim.MaxActive ($13, > 0), counted as in
-- ReserveInsertLimited. No row back: the limit held (nothing inserted); a
-- duplicate scope still fails with a unique violation.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
                             owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                             tombstone_ttl, tenant_hash)
SELECT $2, $3, $4, $5, $6, $7, 'RESERVED', 1, $8, now + $9, now + $10, now, now, $11, $12 FROM clock
WHERE $8 >= (SELECT writer_epoch FROM idem_control WHERE id = 1)
  AND (SELECT count(*) FROM (SELECT 1 FROM idem_operations
                             WHERE owner = $5 AND operation = $4 AND state IN ('RESERVED', 'EXECUTING', 'UNKNOWN')
                               AND (state = 'UNKNOWN' OR lease_until > now)
                             LIMIT $13)) < $13
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state,
          owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
          resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: GetByScope
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations WHERE scope = $1;

-- name: GetByID
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations
-- Through the primary key (migration 021): the scopes of the ID's prefix,
-- then the whole ID; or, for an ID that does not lead to its scope, the
-- scope idem_legacy_operation_ids holds. A malformed ID names no scope.
WHERE (scope BETWEEN unhex(CASE WHEN length($1) = 40 AND substr($1, 1, 4) = 'op_1' THEN substr($1, 15, 10) || '000000000000000000000000000000000000000000000000000000' END)
                AND unhex(CASE WHEN length($1) = 40 AND substr($1, 1, 4) = 'op_1' THEN substr($1, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF' END)
       OR scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = $1))
  AND operation_id = $1;

-- name: CompleteOperation
-- The fenced compare-and-set to a terminal state; no row back means the
-- owner generation or the state moved on (ErrFenced), or that $12, the
-- committing writer's epoch, is older than idem_control's (ErrWriterFenced,
-- migration 003). $13 is the body's key ID (NULL: plaintext; migration
-- 009). The transition trigger of the migration refuses illegal
-- target states. Retention counts from settlement (migration 011):
-- expires_at becomes this instant plus the retention, which the insert
-- stored as expires_at - created_at. An abandoned reservation's tombstone
-- (retired_at set) is fenced.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_operations
SET state = $4, resp_status = $5, resp_media_type = $6, resp_location = $7, resp_etag = $8,
    resp_body = coalesce($9, x''), resp_digest = $10, resp_key = $13, updated_at = clock.now,
    expires_at = clock.now + (expires_at - created_at)
FROM clock
WHERE scope = $2 AND operation_id = $11 AND owner_gen = $3 AND state IN ('RESERVED', 'EXECUTING')
  AND retired_at IS NULL
  AND $12 >= (SELECT writer_epoch FROM idem_control WHERE id = 1)
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state,
          owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
          resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: InsertOutbox
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, payload_key, trace_parent)
SELECT $2, $3, $4, coalesce($5, x''), now, $6, nullif($7, '') FROM clock;

-- name: Release
-- Generations restart at 1 for every new reservation of a scope, so the
-- operation ID is part of the fence.
DELETE FROM idem_operations
WHERE scope = $1 AND operation_id = $3 AND owner_gen = $2 AND state = 'RESERVED' AND retired_at IS NULL;

-- name: TakeOver
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_operations
SET owner_gen = owner_gen + 1, lease_until = clock.now + $4, updated_at = clock.now
FROM clock
WHERE scope = $2 AND operation_id = $5 AND owner_gen = $3 AND state IN ('RESERVED', 'EXECUTING')
  AND lease_until <= clock.now
  AND retired_at IS NULL -- an abandoned reservation's tombstone is not taken over (migration 011)
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state,
          owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
          resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: ClaimOutbox
-- Run inside a BEGIN IMMEDIATE transaction: SQLite's single writer is what
-- FOR UPDATE SKIP LOCKED is on PostgreSQL. RETURNING order is unspecified;
-- the caller sorts by seq.
-- A claim, or a failed attempt's backoff (migration 007), lasts until
-- claimed_until. Dead letters are never claimed. Nor are the messages of
-- a fenced tenant (migration 015): their copies are delivered from the
-- tenant's new registry; the fence test runs only when some tenant is
-- fenced.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_outbox
SET claimed_until = clock.now + $3
FROM clock
WHERE seq IN (SELECT o.seq FROM idem_outbox AS o, clock AS c
              WHERE o.published_at IS NULL AND o.dead_at IS NULL
                AND (o.claimed_until IS NULL OR o.claimed_until <= c.now)
                AND (NOT EXISTS (SELECT 1 FROM idem_tenant_fences)
                     OR NOT EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations r ON r.tenant_hash = f.tenant_hash
                                    WHERE (r.scope BETWEEN unhex(substr(o.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(o.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
                                           OR r.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = o.operation_id))
                                      AND r.operation_id = o.operation_id))
              ORDER BY o.seq LIMIT $2)
RETURNING seq, message_id, operation_id, topic, payload, created_at,
          attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent;

-- name: MarkPublished
-- $2 is a JSON array of message IDs.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_outbox
SET published_at = clock.now
FROM clock
WHERE message_id IN (SELECT value FROM json_each($2)) AND published_at IS NULL;
