-- Retention (SPEC E5, registry/retention.go): expired terminal records
-- become tombstones; tombstones of operations that declared a
-- TombstoneTTL are deleted after it. retention.sql holds the Prune
-- statements; the record columns of queries.sql include the new columns.
--
--   retired_at       when the record was retired (NULL: it is not a tombstone)
--   tombstone_until  when the tombstone may be deleted (NULL: never); set at
--                    retirement to retired_at + tombstone_ttl
--   tombstone_ttl    Claim.TombstoneTTL in microseconds, fixed at the claim
--                    (NULL: keep the tombstone forever, the default)
--
-- SQLite cannot change a CHECK constraint in place, so idem_operations is
-- rebuilt (https://sqlite.org/lang_altertable.html#otheralter): a new table
-- with the new columns and constraints, every row copied, the old table
-- dropped (with its indexes and triggers) and the new one renamed; then the
-- indexes of 001 and 002 and the triggers are created again. It runs in
-- the migration's transaction, holding the write lock while it copies.
-- Nothing refers to idem_operations by foreign key.

CREATE TABLE idem_operations_004 (
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
    -- A tombstone is a terminal record without any part of its response.
    CONSTRAINT idem_operations_tombstone CHECK (
        retired_at IS NULL OR (
            state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
            AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
            AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
    ),
    -- Only a tombstone has a deletion time, and only if its claim gave a TTL.
    CONSTRAINT idem_operations_tombstone_until CHECK (
        tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL)
    )
) STRICT;

INSERT INTO idem_operations_004 (scope, operation_id, operation, owner, fingerprint, contract, state,
                                 owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
                                 resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest)
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest
FROM idem_operations;

DROP TABLE idem_operations;
ALTER TABLE idem_operations_004 RENAME TO idem_operations;

-- The indexes of 001 and 002, as they were.
CREATE INDEX idem_operations_lease ON idem_operations (lease_until)
    WHERE state IN ('RESERVED', 'EXECUTING');
CREATE INDEX idem_operations_expires ON idem_operations (expires_at);
CREATE INDEX idem_operations_active ON idem_operations (owner, operation)
    WHERE state IN ('RESERVED', 'EXECUTING');

-- What Prune looks for: terminal records not yet retired, by expiry, and
-- tombstones with a deletion time, by that time. Both partial, so neither
-- grows with the tombstones kept forever. (retention.sql repeats their
-- WHERE terms verbatim: SQLite uses a partial index only then.)
CREATE INDEX idem_operations_retire ON idem_operations (expires_at)
    WHERE retired_at IS NULL AND state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED');
CREATE INDEX idem_operations_tombstones ON idem_operations (tombstone_until)
    WHERE tombstone_until IS NOT NULL;
-- Prune deletes the published outbox messages of deleted tombstones.
CREATE INDEX IF NOT EXISTS idem_outbox_operation ON idem_outbox (operation_id);

-- The transition triggers of 001, extended. The legal changes of an
-- in-flight or UNKNOWN record are still exactly those of
-- idem.CanTransition (state.go), and none of them may retire it.
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

CREATE TRIGGER idem_operations_retire_terminal_only BEFORE UPDATE ON idem_operations
WHEN OLD.state NOT IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
 AND (NEW.retired_at IS NOT NULL OR NEW.tombstone_until IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: only a terminal record can be retired');
END;

-- The only change allowed to a terminal record is its retirement:
-- retired_at from NULL to a time, the whole response dropped,
-- tombstone_until = retired_at + tombstone_ttl, state, lease, expiry,
-- generation and epoch unchanged (updated_at may move).
CREATE TRIGGER idem_operations_terminal BEFORE UPDATE ON idem_operations
WHEN OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL AND (
    NEW.retired_at IS NULL OR NEW.state IS NOT OLD.state
    OR NEW.resp_status IS NOT NULL OR NEW.resp_media_type IS NOT NULL
    OR NEW.resp_location IS NOT NULL OR NEW.resp_etag IS NOT NULL
    OR NEW.resp_body IS NOT NULL OR NEW.resp_digest IS NOT NULL
    OR NEW.tombstone_until IS NOT NEW.retired_at + OLD.tombstone_ttl
    OR NEW.owner_gen IS NOT OLD.owner_gen OR NEW.writer_epoch IS NOT OLD.writer_epoch
    OR NEW.lease_until IS NOT OLD.lease_until OR NEW.expires_at IS NOT OLD.expires_at
    OR NEW.contract IS NOT OLD.contract)
BEGIN
    SELECT RAISE(ABORT, 'idem: a terminal record can only be retired (response dropped, nothing else changed)');
END;

-- A tombstone never changes.
CREATE TRIGGER idem_operations_tombstone BEFORE UPDATE ON idem_operations
WHEN OLD.retired_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'idem: a tombstone never changes');
END;

-- Identity columns (tombstone_ttl included) never change and the owner
-- generation never goes down.
CREATE TRIGGER idem_operations_identity BEFORE UPDATE ON idem_operations
WHEN NEW.scope IS NOT OLD.scope OR NEW.operation_id IS NOT OLD.operation_id
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.owner IS NOT OLD.owner
  OR NEW.operation IS NOT OLD.operation OR NEW.created_at IS NOT OLD.created_at
  OR NEW.tombstone_ttl IS NOT OLD.tombstone_ttl
  OR NEW.owner_gen < OLD.owner_gen
BEGIN
    SELECT RAISE(ABORT, 'idem: identity columns are immutable and owner_gen never decreases');
END;

-- Deleting a record forgets that its operation ran, so a retry would run
-- it again. Only two deletions are legal: Store.Release of a reservation
-- (RESERVED, nothing outside the database happened) and Prune of a
-- tombstone whose operation declared a TombstoneTTL. (Whether its time has
-- come is Prune's to check: the database cannot see an injected clock.)
CREATE TRIGGER idem_operations_delete BEFORE DELETE ON idem_operations
WHEN NOT (OLD.state = 'RESERVED' OR OLD.tombstone_until IS NOT NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: only reservations and expiring tombstones can be deleted');
END;
