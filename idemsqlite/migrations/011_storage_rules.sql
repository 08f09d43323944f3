-- The storage layer keeps its own rules, and retention counts from
-- settlement (SPEC E5; registry/retention.go).
--
-- SQLite cannot change the CHECK constraints of a table in place, so
-- idem_operations is rebuilt as in 004
-- (https://sqlite.org/lang_altertable.html#otheralter): a new table with
-- the new constraints, every row copied, the old table dropped (with its
-- indexes and triggers) and the new one renamed; then the indexes and
-- triggers of 001, 004, 008 and 009 are created again, two of them changed
-- (B below). It runs in the migration's transaction, holding the write
-- lock while it copies. A row that breaks a new rule stops the migration
-- ("CHECK constraint failed"); find it with
--   SELECT operation_id FROM idem_operations
--   WHERE NOT (resp_status BETWEEN 200 AND 299 OR resp_status BETWEEN 400 AND 499)
--      OR length(resp_body) > 65536 + CASE WHEN resp_key IS NULL THEN 0 ELSE 1024 END;
--
-- A1. idem_operations_response_rules: a stored response has a status of
--    2xx or 4xx (200–499, not a redirect) and a body of at most 65536
--    bytes (idem.MaxStoredBody, the snapshot cap) — that bounds the
--    plaintext; a sealed body (resp_key set) may be up to 1024 bytes
--    longer (registry.MaxSealOverhead: keyring adds 29). (length() of a
--    BLOB is its size in bytes; the table is STRICT.)
-- B1. idem_operations_tombstone: a tombstone has no response, and may be
--    an abandoned reservation's (RESERVED or EXECUTING; B2), never an
--    UNKNOWN record's.
CREATE TABLE idem_operations_011 (
    scope           BLOB    PRIMARY KEY CHECK (length(scope) = 32),
    operation_id    TEXT    NOT NULL UNIQUE,
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

INSERT INTO idem_operations_011 (scope, operation_id, operation, owner, fingerprint, contract, state,
                                 owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                                 resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest,
                                 retired_at, tombstone_until, tombstone_ttl, resp_key)
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest,
       retired_at, tombstone_until, tombstone_ttl, resp_key
FROM idem_operations;

DROP TABLE idem_operations;
ALTER TABLE idem_operations_011 RENAME TO idem_operations;

-- The indexes of 001, 004, 006 and 008, as they were.
CREATE INDEX idem_operations_lease ON idem_operations (lease_until)
    WHERE state IN ('RESERVED', 'EXECUTING');
CREATE INDEX idem_operations_expires ON idem_operations (expires_at);
CREATE INDEX idem_operations_retire ON idem_operations (expires_at)
    WHERE retired_at IS NULL AND state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED');
CREATE INDEX idem_operations_tombstones ON idem_operations (tombstone_until)
    WHERE tombstone_until IS NOT NULL;
CREATE INDEX idem_operations_unknown_age ON idem_operations (created_at, operation_id)
    WHERE state = 'UNKNOWN';
CREATE INDEX idem_operations_inflight ON idem_operations (owner, operation)
    WHERE state IN ('RESERVED', 'EXECUTING', 'UNKNOWN');

-- The triggers of 004 and 009, as they were: transitions of records in
-- flight, what may change of a terminal record, tombstones never change,
-- identity columns never change.
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

CREATE TRIGGER idem_operations_identity BEFORE UPDATE ON idem_operations
WHEN NEW.scope IS NOT OLD.scope OR NEW.operation_id IS NOT OLD.operation_id
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.owner IS NOT OLD.owner
  OR NEW.operation IS NOT OLD.operation OR NEW.created_at IS NOT OLD.created_at
  OR NEW.tombstone_ttl IS NOT OLD.tombstone_ttl
  OR NEW.owner_gen < OLD.owner_gen
BEGIN
    SELECT RAISE(ABORT, 'idem: identity columns are immutable and owner_gen never decreases');
END;

-- B2. A record not terminal is retired only when it is an abandoned
--    reservation (004's idem_operations_retire_terminal_only refused it
--    always): RESERVED or EXECUTING, no effect attempt recorded (nothing
--    of it was committed), retired_at no earlier than lease_until +
--    retention (expires_at - created_at, unchanged until settlement; by
--    the pruner's clock, which retired_at is), tombstone_until =
--    retired_at + tombstone_ttl, state and everything else unchanged.
--    UNKNOWN records are never retired.
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

-- B3. 004's delete trigger: Store.Release deletes a live reservation only;
--    an abandoned one's tombstone goes only as any tombstone does (a
--    deletion time, Prune).
CREATE TRIGGER idem_operations_delete BEFORE DELETE ON idem_operations
WHEN NOT ((OLD.state = 'RESERVED' AND OLD.retired_at IS NULL) OR OLD.tombstone_until IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: only reservations and expiring tombstones can be deleted');
END;

-- A2. SQLite has no TRUNCATE. DELETE without WHERE is a row-by-row delete
--    when the table has a DELETE trigger (the "truncate optimisation" is
--    off then), so the triggers below refuse it as they refuse any delete.
--
-- A3. DELETE only on the paths that own it, told apart by the row alone.
--    idem_operations keeps its trigger of 004 (a reservation,
--    Store.Release; a tombstone with a deletion time, Prune). The others:
--    * idem_outbox: Prune deletes the PUBLISHED messages of operations
--      whose tombstones it deleted (PruneDeleteOutbox runs after
--      PruneDelete). A message may go when it was published and its
--      record is gone or is a tombstone with a deletion time.
--    * idem_effects, idem_reconciliations: Prune deletes them with their
--      operation's tombstone: the same condition on the record.
--    * idem_prune_runs: RecordPruneRun's transaction (TrimPruneRuns)
--      keeps the newest 100 (registry.MaxPruneRuns); only a row with 100
--      newer ones may go.
--    * idem_audit refuses every delete already (010).
CREATE TRIGGER idem_outbox_delete BEFORE DELETE ON idem_outbox
WHEN OLD.published_at IS NULL
  OR EXISTS (SELECT 1 FROM idem_operations WHERE operation_id = OLD.operation_id AND tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: an outbox message is deleted only once published, with its operation''s expiring tombstone');
END;

CREATE TRIGGER idem_effects_delete BEFORE DELETE ON idem_effects
WHEN EXISTS (SELECT 1 FROM idem_operations WHERE operation_id = OLD.operation_id AND tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: an effect attempt is deleted only with its operation''s expiring tombstone');
END;

CREATE TRIGGER idem_reconciliations_delete BEFORE DELETE ON idem_reconciliations
WHEN EXISTS (SELECT 1 FROM idem_operations WHERE operation_id = OLD.operation_id AND tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: a reconciliation is deleted only with its operation''s expiring tombstone');
END;

CREATE TRIGGER idem_prune_runs_delete BEFORE DELETE ON idem_prune_runs
WHEN (SELECT count(*) FROM (SELECT 1 FROM idem_prune_runs WHERE seq > OLD.seq LIMIT 100)) < 100
BEGIN
    SELECT RAISE(ABORT, 'idem: only prune runs older than the newest 100 are deleted');
END;
