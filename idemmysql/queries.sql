-- Named queries of the MySQL/MariaDB driver, loaded with internal/sqlfile.
--
-- Parameters are $1, $2 …, rewritten to MySQL's "?" by bind
-- (placeholders.go): a repeated $N binds the same argument again. Times
-- are BIGINT microseconds since the Unix epoch. Every statement that needs
-- "now" takes it as $1: NULL means database time,
-- CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), which MySQL evaluates
-- once per statement (NOW is the statement's start), so every column a
-- statement writes sees the same instant.
--
-- MySQL has no UPDATE … RETURNING: a state change is one compare-and-set
-- UPDATE whose affected-row count (clientFoundRows: rows matched) says
-- whether it held, followed in the same transaction by a read of the row
-- it holds locked.
--
-- Record column order (scanRecord in record.go depends on it):
--   scope, operation_id, operation, owner, fingerprint, contract, state,
--   owner_gen, writer_epoch, lease_until, expires_at, created_at,
--   updated_at, resp_status, resp_media_type, resp_location, resp_etag,
--   resp_body, resp_digest, resp_key, retired_at, tombstone_until,
--   tombstone_ttl, tenant_hash (migration 006)

-- name: CreateMigrationsTable
CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    applied_at BIGINT NOT NULL
) ENGINE=InnoDB;

-- name: MigrationApplied
SELECT count(*) FROM idem_schema_migrations WHERE version = $1;

-- name: RecordMigration
INSERT INTO idem_schema_migrations (version, applied_at)
VALUES ($2, coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)));

-- name: ClaimInsert
-- The acceptance point: a plain INSERT, so a duplicate scope fails with
-- a duplicate-key error (1062 on PRIMARY) after waiting for the
-- transaction that inserted it to end (InnoDB's shared lock on the
-- duplicate index record). The control row is read with a shared lock
-- (the writer fence, $8 the claim's epoch): a concurrent BumpEpoch waits
-- for this transaction, and this insert for a BumpEpoch in progress. No
-- row inserted: the fence held. $11 is the tombstone TTL in µs, NULL to
-- keep the tombstone forever; $12 the tenant hash (registry.TenantHash;
-- migration 006).
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
                             owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                             tombstone_ttl, tenant_hash)
SELECT $2, $3, $4, $5, $6, $7, 'RESERVED', 1, $8, clock.now + $9, clock.now + $10, clock.now, clock.now, $11, $12
FROM (SELECT coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) AS now) AS clock
WHERE $8 >= (SELECT writer_epoch FROM idem_control WHERE id = 1 LOCK IN SHARE MODE);

-- name: ClaimInsertLimited
-- ClaimInsert with Claim.MaxActive ($13, > 0): the row is inserted only
-- while the owner holds fewer than $13 active records of the operation —
-- UNKNOWN ones, and RESERVED or EXECUTING ones whose lease has not
-- expired (idem_operations_inflight; the LIMIT stops the count at $13).
-- Under READ COMMITTED the count reads committed rows without locking
-- them, so racing reservations may overshoot the bound by the number of
-- racers, as registry.Claim.MaxActive allows. No row inserted: the fence
-- or the limit held.
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract, state,
                             owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                             tombstone_ttl, tenant_hash)
SELECT $2, $3, $4, $5, $6, $7, 'RESERVED', 1, $8, clock.now + $9, clock.now + $10, clock.now, clock.now, $11, $12
FROM (SELECT coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) AS now) AS clock
WHERE $8 >= (SELECT writer_epoch FROM idem_control WHERE id = 1 LOCK IN SHARE MODE)
  AND (SELECT count(*) FROM (SELECT 1 FROM idem_operations
                             WHERE owner = $5 AND operation = $4 AND state IN ('RESERVED', 'EXECUTING', 'UNKNOWN')
                               AND (state = 'UNKNOWN' OR lease_until > coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))
                             LIMIT $13) AS active) < $13;

-- name: GetByScope
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations WHERE scope = $1;

-- name: GetByID
-- Through the primary key (migration 012): the scopes of the ID's
-- prefix, then the whole ID byte for byte (a parameter compares under the
-- connection's collation, which folds case); or, for an ID that does not
-- lead to its scope, the scope idem_legacy_operation_ids holds. A
-- malformed ID names no scope and finds nothing.
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations
WHERE scope BETWEEN IF(CHAR_LENGTH($1) = 40 AND LEFT($1, 4) = 'op_1', RPAD(UNHEX(SUBSTRING($1, 15, 10)), 32, X'00'), NULL)
                AND IF(CHAR_LENGTH($1) = 40 AND LEFT($1, 4) = 'op_1', RPAD(UNHEX(SUBSTRING($1, 15, 10)), 32, X'FF'), NULL)
  AND CAST(operation_id AS BINARY) = CAST($1 AS BINARY)
UNION ALL
SELECT o.scope, o.operation_id, o.operation, o.owner, o.fingerprint, o.contract, o.state,
       o.owner_gen, o.writer_epoch, o.lease_until, o.expires_at, o.created_at, o.updated_at,
       o.resp_status, o.resp_media_type, o.resp_location, o.resp_etag, o.resp_body, o.resp_digest, o.resp_key,
       o.retired_at, o.tombstone_until, o.tombstone_ttl, o.tenant_hash
FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
WHERE l.operation_id = $1 AND CAST(o.operation_id AS BINARY) = CAST($1 AS BINARY);

-- name: CompleteOperation
-- The fenced compare-and-set to a terminal state; no row matched means
-- the owner generation or the state moved on (ErrFenced), or that $12,
-- the committing writer's epoch, is older than idem_control's
-- (ErrWriterFenced). $13 is the body's key ID (NULL: plaintext). The
-- trigger refuses illegal target states. Retention counts from
-- settlement: expires_at becomes this instant plus the retention, which
-- the insert stored as expires_at - created_at (MySQL evaluates SET left
-- to right; expires_at's own old value is read before it is assigned).
UPDATE idem_operations
SET state = $4, resp_status = $5, resp_media_type = $6, resp_location = $7, resp_etag = $8,
    resp_body = coalesce($9, x''), resp_digest = $10, resp_key = $13,
    expires_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) + (expires_at - created_at),
    updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE scope = $2 AND operation_id = $11 AND owner_gen = $3 AND state IN ('RESERVED', 'EXECUTING')
  AND retired_at IS NULL
  AND $12 >= (SELECT writer_epoch FROM idem_control WHERE id = 1 LOCK IN SHARE MODE);

-- name: InsertOutbox
INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, payload_key, trace_parent)
VALUES ($2, $3, $4, coalesce($5, x''), coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), $6, nullif($7, ''));

-- name: Release
-- Generations restart at 1 for every new reservation of a scope, so the
-- operation ID is part of the fence.
DELETE FROM idem_operations
WHERE scope = $1 AND operation_id = $3 AND owner_gen = $2 AND state = 'RESERVED' AND retired_at IS NULL;

-- name: TakeOver
UPDATE idem_operations
SET owner_gen = owner_gen + 1,
    lease_until = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) + $4,
    updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE scope = $2 AND operation_id = $5 AND owner_gen = $3 AND state IN ('RESERVED', 'EXECUTING')
  AND lease_until <= coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
  AND retired_at IS NULL;

-- name: ClaimOutboxPick
-- The messages a relay may claim, locked; SKIP LOCKED passes over the
-- rows another relay is claiming right now (MariaDB 10.6, MySQL 8.0).
-- A fenced tenant's messages (migration 006) stay unclaimed: they are
-- published from the tenant's new registry. The fence test runs only
-- when some tenant is fenced (the table is almost always empty).
SELECT seq FROM idem_outbox
WHERE published_at IS NULL AND dead_at IS NULL
  AND (claimed_until IS NULL OR claimed_until <= coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))
  AND (NOT EXISTS (SELECT 1 FROM idem_tenant_fences)
       OR NOT EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                      WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(idem_outbox.operation_id, 15, 10)), 32, X'00')
                                        AND RPAD(UNHEX(SUBSTRING(idem_outbox.operation_id, 15, 10)), 32, X'FF')
                        AND o.operation_id = idem_outbox.operation_id)
       AND NOT EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                      JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                      WHERE l.operation_id = idem_outbox.operation_id AND o.operation_id = idem_outbox.operation_id))
ORDER BY seq LIMIT $2
FOR UPDATE SKIP LOCKED;

-- name: ClaimOutboxMark
-- $3 is a JSON array of the picked seqs.
UPDATE idem_outbox
SET claimed_until = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) + $2
WHERE seq IN (SELECT j.seq FROM JSON_TABLE($3, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS j);

-- name: OutboxBySeqs
-- $1 is a JSON array of seqs.
SELECT seq, message_id, operation_id, topic, payload, created_at,
       attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent
FROM idem_outbox
WHERE seq IN (SELECT j.seq FROM JSON_TABLE($1, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS j)
ORDER BY seq;

-- name: MarkPublished
-- $2 is a JSON array of message IDs.
UPDATE idem_outbox
SET published_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE message_id IN (SELECT j.id FROM JSON_TABLE($2, '$[*]' COLUMNS (id VARCHAR(128) CHARACTER SET ascii PATH '$')) AS j)
  AND published_at IS NULL;

-- name: ControlGet
SELECT writer_epoch, draining, updated_at FROM idem_control WHERE id = 1;

-- name: ControlEpoch
SELECT writer_epoch FROM idem_control WHERE id = 1;

-- name: ControlBumpEpoch
-- The row lock makes concurrent bumps each raise the epoch by one; the
-- caller reads the new epoch in the same transaction.
UPDATE idem_control
SET writer_epoch = writer_epoch + 1,
    updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE id = 1;

-- name: ControlSetDraining
-- $2 is 0 or 1.
UPDATE idem_control
SET draining = $2, updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE id = 1;

-- name: DurabilitySettings
-- What Open checks (durability.go).
SELECT @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog, @@version;
