-- idem registry, SQLite. One row per idempotent operation; the unique
-- scope is the acceptance point. Times are INTEGER microseconds since the
-- Unix epoch, taken from the database (unixepoch('subsec')) unless a test
-- injects them.

CREATE TABLE idem_operations (
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
    -- A terminal record carries a complete response snapshot; no other does.
    CONSTRAINT idem_operations_response CHECK (
        (state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')) =
        (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
         AND resp_etag IS NOT NULL AND resp_body IS NOT NULL AND coalesce(length(resp_digest) = 32, 0))
    ),
    CONSTRAINT idem_operations_response_absent CHECK (
        state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') OR
        (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
    )
) STRICT;

CREATE INDEX idem_operations_lease ON idem_operations (lease_until)
    WHERE state IN ('RESERVED', 'EXECUTING');
CREATE INDEX idem_operations_expires ON idem_operations (expires_at);

-- The legal transitions are those of idem.CanTransition (state.go); the
-- conformance suite checks that this trigger allows exactly those.
CREATE TRIGGER idem_operations_transition BEFORE UPDATE ON idem_operations
WHEN (OLD.state, NEW.state) NOT IN (VALUES
    ('RESERVED', 'RESERVED'), ('RESERVED', 'EXECUTING'), ('RESERVED', 'SUCCEEDED'),
    ('RESERVED', 'FAILED_FINAL'), ('RESERVED', 'REJECTED'),
    ('EXECUTING', 'EXECUTING'), ('EXECUTING', 'SUCCEEDED'), ('EXECUTING', 'FAILED_FINAL'),
    ('EXECUTING', 'UNKNOWN'),
    ('UNKNOWN', 'SUCCEEDED'), ('UNKNOWN', 'FAILED_FINAL'))
BEGIN
    SELECT RAISE(ABORT, 'idem: illegal state transition');
END;

-- Identity columns never change and the owner generation never goes down.
CREATE TRIGGER idem_operations_identity BEFORE UPDATE ON idem_operations
WHEN NEW.scope IS NOT OLD.scope OR NEW.operation_id IS NOT OLD.operation_id
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.owner IS NOT OLD.owner
  OR NEW.operation IS NOT OLD.operation OR NEW.created_at IS NOT OLD.created_at
  OR NEW.owner_gen < OLD.owner_gen
BEGIN
    SELECT RAISE(ABORT, 'idem: identity columns are immutable and owner_gen never decreases');
END;

-- Transactional outbox: rows written in the business transaction.
CREATE TABLE idem_outbox (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id    TEXT    NOT NULL UNIQUE,
    operation_id  TEXT    NOT NULL,
    topic         TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    created_at    INTEGER NOT NULL,
    claimed_until INTEGER,
    published_at  INTEGER
) STRICT;

CREATE INDEX idem_outbox_pending ON idem_outbox (seq) WHERE published_at IS NULL;
