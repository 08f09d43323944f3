-- Scope-led operation IDs (docs/contract.md, "Operation IDs", layout v1):
-- an ID carries the first 5 bytes of its record's scope in 10 upper-case
-- hex characters (characters 15 to 24), so a record is found by ID through
-- the primary key — the scopes of that prefix (about one record), then
-- the full ID — and the unique index on operation_id goes: it was a
-- second B-tree written on every insert. The same rules as idempg's
-- migration 026 and idemmysql's 012.
--
-- Uniqueness of operation IDs holds without it, by construction: the scope
-- is the primary key and an ID carries its scope's prefix, so two records
-- could share an ID only if their scopes shared 40 bits and their IDs the
-- same millisecond and the same 80 random bits (crypto/rand).
--
-- IDs that do not lead to their scope — every ID made before this
-- migration (the ULID layout, "op_" and 26 characters) and any a record
-- is inserted with later (an import of an older registry's tenant, a
-- previous binary after a rollback) — are kept in idem_legacy_operation_ids
-- with their scope, written here and by the triggers below, until their
-- records are deleted; its primary key keeps those IDs unique as the
-- dropped index did. A partial index over legacy rows would do on SQLite
-- and PostgreSQL, but MariaDB has none, so all three drivers keep a table.
--
-- SQLite cannot drop a UNIQUE column constraint, so idem_operations is
-- rebuilt as in 004 and 011 (https://sqlite.org/lang_altertable.html#otheralter):
-- the same table without UNIQUE on operation_id, every row copied, the old
-- table dropped with its indexes and triggers and the new one renamed;
-- then its indexes and triggers are created again as they were (001, 004,
-- 006, 008, 011, 012, 015). It runs in the migration's transaction,
-- holding the write lock while it copies. The triggers of other tables
-- that read a record by its ID are made again to read it through the
-- primary key (or the legacy table). unhex() of the prefix padded in hex
-- gives a BLOB bound (|| of two BLOBs would give TEXT, which sorts below
-- every BLOB).
CREATE TABLE idem_legacy_operation_ids (
    operation_id TEXT PRIMARY KEY,
    scope        BLOB NOT NULL CHECK (length(scope) = 32)
) STRICT;

INSERT INTO idem_legacy_operation_ids (operation_id, scope)
SELECT operation_id, scope FROM idem_operations
WHERE NOT (length(operation_id) = 40 AND substr(operation_id, 1, 4) = 'op_1'
           AND substr(operation_id, 15, 10) = hex(substr(scope, 1, 5)));

CREATE TABLE idem_operations_021 (
    scope           BLOB    PRIMARY KEY CHECK (length(scope) = 32),
    operation_id    TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    owner           BLOB    NOT NULL CHECK (length(owner) = 32),
    fingerprint     BLOB    NOT NULL CHECK (length(fingerprint) = 32),
    contract        TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED')),
    owner_gen       INTEGER NOT NULL CHECK (owner_gen >= 1),
    writer_epoch    INTEGER NOT NULL,
    lease_until     INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    resp_status     INTEGER,
    resp_media_type TEXT,
    resp_location   TEXT,
    resp_etag       TEXT,
    resp_body       BLOB,
    resp_digest     BLOB,
    retired_at      INTEGER,
    tombstone_until INTEGER,
    tombstone_ttl   INTEGER CONSTRAINT idem_operations_tombstone_ttl CHECK (tombstone_ttl > 0),
    resp_key        TEXT    NULL CONSTRAINT idem_operations_resp_key CHECK (resp_key IS NULL OR resp_body IS NOT NULL),
    tenant_hash     BLOB    NULL CONSTRAINT idem_operations_tenant_hash CHECK (tenant_hash IS NULL OR length(tenant_hash) = 32),
    -- A terminal record carries a complete response snapshot unless it is
    -- a tombstone; no other record does.
    CONSTRAINT idem_operations_response CHECK (
        (state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND retired_at IS NULL) =
        (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
         AND resp_etag IS NOT NULL AND resp_body IS NOT NULL AND coalesce(length(resp_digest) = 32, 0))
    ),
    CONSTRAINT idem_operations_response_absent CHECK (
        state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') OR
        (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
    ),
    -- A1: the storage rules of a response.
    CONSTRAINT idem_operations_response_rules CHECK (
        (resp_status IS NULL OR resp_status BETWEEN 200 AND 299 OR resp_status BETWEEN 400 AND 499)
        AND (resp_body IS NULL OR length(resp_body) <= 65536 + CASE WHEN resp_key IS NULL THEN 0 ELSE 1024 END)
    ),
    -- B1: a tombstone is a record without any part of its response, never
    -- an UNKNOWN one.
    CONSTRAINT idem_operations_tombstone CHECK (
        retired_at IS NULL OR (
            state <> 'UNKNOWN'
            AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
            AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
    ),
    -- Only a tombstone has a deletion time, and only if its claim gave a TTL.
    CONSTRAINT idem_operations_tombstone_until CHECK (
        tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL)
    )
) STRICT;

INSERT INTO idem_operations_021 (scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, retired_at, tombstone_until, tombstone_ttl, resp_key, tenant_hash)
SELECT scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, retired_at, tombstone_until, tombstone_ttl, resp_key, tenant_hash
FROM idem_operations;

-- The other tables' triggers that name idem_operations go first (a
-- rename checks every trigger), and come back changed below.
DROP TRIGGER idem_effect_lookups_delete;
DROP TRIGGER idem_effect_lookups_tenant_fence;
DROP TRIGGER idem_effects_delete;
DROP TRIGGER idem_effects_tenant_fence_insert;
DROP TRIGGER idem_effects_tenant_fence_update;
DROP TRIGGER idem_outbox_delete;
DROP TRIGGER idem_outbox_tenant_fence;
DROP TRIGGER idem_pending_settlements_delete;
DROP TRIGGER idem_pending_settlements_tenant_fence_insert;
DROP TRIGGER idem_pending_settlements_tenant_fence_update;
DROP TRIGGER idem_reconciliations_delete;
DROP TRIGGER idem_reconciliations_tenant_fence;
DROP TABLE idem_operations;
ALTER TABLE idem_operations_021 RENAME TO idem_operations;

-- Its indexes, as they were.
CREATE INDEX idem_operations_expires ON idem_operations (expires_at);
CREATE INDEX idem_operations_inflight ON idem_operations (owner, operation)
    WHERE state IN ('RESERVED', 'EXECUTING', 'UNKNOWN');
CREATE INDEX idem_operations_lease ON idem_operations (lease_until)
    WHERE state IN ('RESERVED', 'EXECUTING');
CREATE INDEX idem_operations_retire ON idem_operations (expires_at)
    WHERE retired_at IS NULL AND state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED');
CREATE INDEX idem_operations_tenant ON idem_operations (tenant_hash, state);
CREATE INDEX idem_operations_tombstones ON idem_operations (tombstone_until)
    WHERE tombstone_until IS NOT NULL;
CREATE INDEX idem_operations_unknown_age ON idem_operations (created_at, operation_id)
    WHERE state = 'UNKNOWN';

-- Its triggers, as they were.
CREATE TRIGGER idem_operations_delete BEFORE DELETE ON idem_operations
WHEN NOT ((OLD.state = 'RESERVED' AND OLD.retired_at IS NULL) OR OLD.tombstone_until IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: only reservations and expiring tombstones can be deleted');
END;

CREATE TRIGGER idem_operations_identity BEFORE UPDATE ON idem_operations
WHEN NEW.scope IS NOT OLD.scope OR NEW.operation_id IS NOT OLD.operation_id
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.owner IS NOT OLD.owner
  OR NEW.operation IS NOT OLD.operation OR NEW.created_at IS NOT OLD.created_at
  OR NEW.tombstone_ttl IS NOT OLD.tombstone_ttl
  OR NEW.owner_gen < OLD.owner_gen
BEGIN
    SELECT RAISE(ABORT, 'idem: identity columns are immutable and owner_gen never decreases');
END;

CREATE TRIGGER idem_operations_retire_abandoned_only BEFORE UPDATE ON idem_operations
WHEN OLD.state NOT IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
 AND (NEW.retired_at IS NOT NULL OR NEW.tombstone_until IS NOT NULL)
 AND NOT (OLD.state IN ('RESERVED', 'EXECUTING') AND NEW.retired_at IS NOT NULL
          AND NEW.state IS OLD.state
          AND NEW.retired_at >= OLD.lease_until + (OLD.expires_at - OLD.created_at)
          AND NOT EXISTS (SELECT 1 FROM idem_effects x WHERE x.operation_id = OLD.operation_id)
          AND NEW.tombstone_until IS NEW.retired_at + OLD.tombstone_ttl
          AND NEW.owner_gen IS OLD.owner_gen AND NEW.writer_epoch IS OLD.writer_epoch
          AND NEW.lease_until IS OLD.lease_until AND NEW.expires_at IS OLD.expires_at
          AND NEW.contract IS OLD.contract)
BEGIN
    SELECT RAISE(ABORT, 'idem: only a terminal record or an abandoned reservation can be retired');
END;

CREATE TRIGGER idem_operations_settled_body BEFORE UPDATE ON idem_operations
WHEN OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL
  AND NEW.retired_at IS NULL
  AND (NEW.resp_body IS NOT OLD.resp_body OR NEW.resp_key IS NOT OLD.resp_key
       OR NEW.resp_digest IS NOT OLD.resp_digest OR NEW.resp_status IS NOT OLD.resp_status
       OR NEW.resp_media_type IS NOT OLD.resp_media_type OR NEW.resp_location IS NOT OLD.resp_location
       OR NEW.resp_etag IS NOT OLD.resp_etag OR NEW.state IS NOT OLD.state)
  AND NOT (OLD.resp_key IS NOT NULL AND NEW.resp_key IS NOT NULL AND NEW.resp_key IS NOT OLD.resp_key
           AND NEW.resp_body IS NOT NULL AND NEW.resp_body IS NOT OLD.resp_body
           AND NEW.resp_digest IS OLD.resp_digest AND NEW.resp_status IS OLD.resp_status
           AND NEW.resp_media_type IS OLD.resp_media_type AND NEW.resp_location IS OLD.resp_location
           AND NEW.resp_etag IS OLD.resp_etag AND NEW.state IS OLD.state)
BEGIN
    SELECT RAISE(ABORT, 'idem: a settled response changes only by a re-seal: body and key together, from one key to another, nothing else');
END;

CREATE TRIGGER idem_operations_tenant_fence_delete BEFORE DELETE ON idem_operations
    WHEN OLD.state IN ('RESERVED', 'EXECUTING', 'UNKNOWN') AND OLD.retired_at IS NULL
     AND OLD.tenant_hash IS NOT NULL
     AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = OLD.tenant_hash)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the record''s tenant is fenced');
END;

CREATE TRIGGER idem_operations_tenant_fence_insert BEFORE INSERT ON idem_operations
    WHEN NEW.tenant_hash IS NOT NULL
     AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = NEW.tenant_hash)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the record''s tenant is fenced');
END;

CREATE TRIGGER idem_operations_tenant_fence_update BEFORE UPDATE ON idem_operations
    WHEN OLD.state IN ('RESERVED', 'EXECUTING', 'UNKNOWN') AND OLD.retired_at IS NULL AND NEW.retired_at IS NULL
     AND OLD.tenant_hash IS NOT NULL
     AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = OLD.tenant_hash)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the record''s tenant is fenced');
END;

CREATE TRIGGER idem_operations_tenant_immutable BEFORE UPDATE OF tenant_hash ON idem_operations
    WHEN NEW.tenant_hash IS NOT OLD.tenant_hash
BEGIN
    SELECT RAISE(ABORT, 'idem: a record''s tenant never changes');
END;

CREATE TRIGGER idem_operations_terminal BEFORE UPDATE ON idem_operations
WHEN OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL AND (
    CASE WHEN NEW.retired_at IS NULL THEN -- a re-seal
        NEW.resp_key IS NULL OR NEW.resp_key IS OLD.resp_key OR NEW.tombstone_until IS NOT NULL
        OR NEW.resp_body IS NULL
        OR NEW.resp_status IS NOT OLD.resp_status OR NEW.resp_media_type IS NOT OLD.resp_media_type
        OR NEW.resp_location IS NOT OLD.resp_location OR NEW.resp_etag IS NOT OLD.resp_etag
        OR NEW.resp_digest IS NOT OLD.resp_digest
    ELSE -- a retirement
        NEW.resp_status IS NOT NULL OR NEW.resp_media_type IS NOT NULL
        OR NEW.resp_location IS NOT NULL OR NEW.resp_etag IS NOT NULL
        OR NEW.resp_body IS NOT NULL OR NEW.resp_digest IS NOT NULL OR NEW.resp_key IS NOT NULL
        OR NEW.tombstone_until IS NOT NEW.retired_at + OLD.tombstone_ttl
    END
    OR NEW.state IS NOT OLD.state
    OR NEW.owner_gen IS NOT OLD.owner_gen OR NEW.writer_epoch IS NOT OLD.writer_epoch
    OR NEW.lease_until IS NOT OLD.lease_until OR NEW.expires_at IS NOT OLD.expires_at
    OR NEW.contract IS NOT OLD.contract)
BEGIN
    SELECT RAISE(ABORT, 'idem: a terminal record can only be retired or re-sealed under another key');
END;

CREATE TRIGGER idem_operations_tombstone BEFORE UPDATE ON idem_operations
WHEN OLD.retired_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'idem: a tombstone never changes');
END;

CREATE TRIGGER idem_operations_transition BEFORE UPDATE ON idem_operations
WHEN OLD.state NOT IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
 AND (OLD.state, NEW.state) NOT IN (VALUES
    ('RESERVED', 'RESERVED'), ('RESERVED', 'EXECUTING'), ('RESERVED', 'SUCCEEDED'),
    ('RESERVED', 'FAILED_FINAL'), ('RESERVED', 'REJECTED'),
    ('EXECUTING', 'EXECUTING'), ('EXECUTING', 'SUCCEEDED'), ('EXECUTING', 'FAILED_FINAL'),
    ('EXECUTING', 'UNKNOWN'),
    ('UNKNOWN', 'SUCCEEDED'), ('UNKNOWN', 'FAILED_FINAL'))
BEGIN
    SELECT RAISE(ABORT, 'idem: illegal state transition');
END;

-- A record whose ID does not lead to its scope is noted; deleting it
-- deletes the note (scope and operation_id never change:
-- idem_operations_identity refuses it).
CREATE TRIGGER idem_operations_legacy_id_insert AFTER INSERT ON idem_operations
WHEN NOT (length(NEW.operation_id) = 40 AND substr(NEW.operation_id, 1, 4) = 'op_1'
          AND substr(NEW.operation_id, 15, 10) = hex(substr(NEW.scope, 1, 5)))
BEGIN
    INSERT INTO idem_legacy_operation_ids (operation_id, scope) VALUES (NEW.operation_id, NEW.scope);
END;

CREATE TRIGGER idem_operations_legacy_id_delete AFTER DELETE ON idem_operations
WHEN NOT (length(OLD.operation_id) = 40 AND substr(OLD.operation_id, 1, 4) = 'op_1'
          AND substr(OLD.operation_id, 15, 10) = hex(substr(OLD.scope, 1, 5)))
BEGIN
    DELETE FROM idem_legacy_operation_ids WHERE operation_id = OLD.operation_id AND scope = OLD.scope;
END;

-- The triggers of 011, 013 and 015 that read a record by its ID, now
-- through the primary key (or the legacy table).

CREATE TRIGGER idem_effect_lookups_delete BEFORE DELETE ON idem_effect_lookups
WHEN EXISTS (SELECT 1 FROM idem_operations o WHERE (o.scope BETWEEN unhex(substr(OLD.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(OLD.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = OLD.operation_id))
              AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: idem_effect_lookups keeps every row of a live operation');
END;

CREATE TRIGGER idem_effect_lookups_tenant_fence BEFORE INSERT ON idem_effect_lookups
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE (o.scope BETWEEN unhex(substr(NEW.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(NEW.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = NEW.operation_id))
              AND o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;

CREATE TRIGGER idem_effects_delete BEFORE DELETE ON idem_effects
WHEN EXISTS (SELECT 1 FROM idem_operations o WHERE (o.scope BETWEEN unhex(substr(OLD.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(OLD.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = OLD.operation_id))
              AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: an effect attempt is deleted only with its operation''s expiring tombstone');
END;

CREATE TRIGGER idem_effects_tenant_fence_insert BEFORE INSERT ON idem_effects
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE (o.scope BETWEEN unhex(substr(NEW.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(NEW.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = NEW.operation_id))
              AND o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;

CREATE TRIGGER idem_effects_tenant_fence_update BEFORE UPDATE ON idem_effects
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE (o.scope BETWEEN unhex(substr(NEW.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(NEW.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = NEW.operation_id))
              AND o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;

CREATE TRIGGER idem_outbox_delete BEFORE DELETE ON idem_outbox
WHEN OLD.published_at IS NULL
  OR EXISTS (SELECT 1 FROM idem_operations o WHERE (o.scope BETWEEN unhex(substr(OLD.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(OLD.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = OLD.operation_id))
              AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: an outbox message is deleted only once published, with its operation''s expiring tombstone');
END;

CREATE TRIGGER idem_outbox_tenant_fence BEFORE INSERT ON idem_outbox
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE (o.scope BETWEEN unhex(substr(NEW.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(NEW.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = NEW.operation_id))
              AND o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;

CREATE TRIGGER idem_pending_settlements_delete BEFORE DELETE ON idem_pending_settlements
WHEN EXISTS (SELECT 1 FROM idem_operations o WHERE (o.scope BETWEEN unhex(substr(OLD.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(OLD.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = OLD.operation_id))
              AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: idem_pending_settlements keeps every row of a live operation');
END;

CREATE TRIGGER idem_pending_settlements_tenant_fence_insert BEFORE INSERT ON idem_pending_settlements
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE (o.scope BETWEEN unhex(substr(NEW.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(NEW.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = NEW.operation_id))
              AND o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;

CREATE TRIGGER idem_pending_settlements_tenant_fence_update BEFORE UPDATE ON idem_pending_settlements
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE (o.scope BETWEEN unhex(substr(NEW.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(NEW.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = NEW.operation_id))
              AND o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;

CREATE TRIGGER idem_reconciliations_delete BEFORE DELETE ON idem_reconciliations
WHEN EXISTS (SELECT 1 FROM idem_operations o WHERE (o.scope BETWEEN unhex(substr(OLD.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(OLD.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = OLD.operation_id))
              AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: a reconciliation is deleted only with its operation''s expiring tombstone');
END;

CREATE TRIGGER idem_reconciliations_tenant_fence BEFORE INSERT ON idem_reconciliations
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE (o.scope BETWEEN unhex(substr(NEW.operation_id, 15, 10) || '000000000000000000000000000000000000000000000000000000') AND unhex(substr(NEW.operation_id, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF')
              OR o.scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = NEW.operation_id))
              AND o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
