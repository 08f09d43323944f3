-- The registry on MySQL/MariaDB: operation records, the outbox and the
-- control row, with the storage rules the other engines enforce
-- (idempg/migrations, idemsqlite/migrations), in their final form.
--
-- InnoDB (row locks, crash-safe commits), utf8mb4, binary columns for the
-- 32-byte hashes, times as BIGINT microseconds since the Unix epoch (as on
-- SQLite: exact, no time zone). CHECK constraints (enforced from MariaDB
-- 10.2 and MySQL 8.0.16) hold the per-row rules; BEFORE triggers that
-- SIGNAL SQLSTATE '45000' hold the rules between the old and the new row
-- (the transition table) and the deletion rules. A statement ends at a
-- line that starts in the first column and ends with ";" (migrate.go), so
-- trigger bodies are indented and need no DELIMITER.

CREATE TABLE idem_operations (
    scope           BINARY(32)   NOT NULL,
    operation_id    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    operation       VARCHAR(255) NOT NULL,
    owner           BINARY(32)   NOT NULL,
    fingerprint     BINARY(32)   NOT NULL,
    contract        VARCHAR(64)  NOT NULL,
    state           VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner_gen       BIGINT       NOT NULL,
    writer_epoch    BIGINT       NOT NULL,
    lease_until     BIGINT       NOT NULL,
    expires_at      BIGINT       NOT NULL,
    created_at      BIGINT       NOT NULL,
    updated_at      BIGINT       NOT NULL,
    resp_status     INT          NULL,
    resp_media_type TEXT         NULL,
    resp_location   TEXT         NULL,
    resp_etag       TEXT         NULL,
    resp_body       MEDIUMBLOB   NULL,
    resp_digest     VARBINARY(64) NULL,
    resp_key        VARCHAR(255) NULL,
    retired_at      BIGINT       NULL,
    tombstone_until BIGINT       NULL,
    tombstone_ttl   BIGINT       NULL,
    PRIMARY KEY (scope),
    CONSTRAINT idem_operations_operation_id UNIQUE (operation_id),
    CONSTRAINT idem_operations_state CHECK (state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED')),
    CONSTRAINT idem_operations_owner_gen CHECK (owner_gen >= 1),
    CONSTRAINT idem_operations_tombstone_ttl CHECK (tombstone_ttl > 0),
    CONSTRAINT idem_operations_resp_key CHECK (resp_key IS NULL OR resp_body IS NOT NULL),
    CONSTRAINT idem_operations_response CHECK (
        (state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND retired_at IS NULL) <=>
        (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
         AND resp_etag IS NOT NULL AND resp_body IS NOT NULL AND coalesce(length(resp_digest) = 32, FALSE))
    ),
    CONSTRAINT idem_operations_response_absent CHECK (
        state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') OR
        (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
    ),
    -- The storage rules (idem.Response.Storable): a 2xx or 4xx status, a
    -- body of at most idem.MaxStoredBody (64 KiB) bytes, plus 1 KiB of
    -- sealing overhead when sealed.
    CONSTRAINT idem_operations_response_rules CHECK (
        (resp_status IS NULL OR resp_status BETWEEN 200 AND 299 OR resp_status BETWEEN 400 AND 499)
        AND (resp_body IS NULL OR length(resp_body) <= 65536 + CASE WHEN resp_key IS NULL THEN 0 ELSE 1024 END)
    ),
    CONSTRAINT idem_operations_tombstone CHECK (
        retired_at IS NULL OR (
            state <> 'UNKNOWN'
            AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
            AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
    ),
    CONSTRAINT idem_operations_tombstone_until CHECK (
        tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL)
    ),
    KEY idem_operations_lease (state, lease_until),
    KEY idem_operations_expires (expires_at),
    KEY idem_operations_tombstones (tombstone_until),
    KEY idem_operations_inflight (owner, operation, state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Every rule between the old and the new row, in one trigger (the first
-- failing check signals; nothing is written).
CREATE TRIGGER idem_operations_update BEFORE UPDATE ON idem_operations
FOR EACH ROW
BEGIN
    -- Identity never changes; generations never go back.
    IF NOT (NEW.scope <=> OLD.scope AND NEW.operation_id <=> OLD.operation_id
            AND NEW.fingerprint <=> OLD.fingerprint AND NEW.owner <=> OLD.owner
            AND NEW.operation <=> OLD.operation AND NEW.created_at <=> OLD.created_at
            AND NEW.tombstone_ttl <=> OLD.tombstone_ttl)
       OR NEW.owner_gen < OLD.owner_gen THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: identity columns are immutable and owner_gen never decreases';
    END IF;
    -- A tombstone never changes.
    IF OLD.retired_at IS NOT NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a tombstone never changes';
    END IF;
    -- The transition table, for records not yet terminal.
    IF OLD.state NOT IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
       AND NOT ((OLD.state = 'RESERVED' AND NEW.state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'REJECTED'))
             OR (OLD.state = 'EXECUTING' AND NEW.state IN ('EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN'))
             OR (OLD.state = 'UNKNOWN' AND NEW.state IN ('SUCCEEDED', 'FAILED_FINAL'))) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: illegal state transition';
    END IF;
    -- Only a terminal record, or a reservation abandoned past its lease and
    -- retention, is retired.
    IF OLD.state NOT IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
       AND (NEW.retired_at IS NOT NULL OR NEW.tombstone_until IS NOT NULL)
       AND NOT (OLD.state IN ('RESERVED', 'EXECUTING') AND NEW.retired_at IS NOT NULL
                AND NEW.state <=> OLD.state
                AND NEW.retired_at >= OLD.lease_until + (OLD.expires_at - OLD.created_at)
                AND NEW.tombstone_until <=> NEW.retired_at + OLD.tombstone_ttl
                AND NEW.owner_gen <=> OLD.owner_gen AND NEW.writer_epoch <=> OLD.writer_epoch
                AND NEW.lease_until <=> OLD.lease_until AND NEW.expires_at <=> OLD.expires_at
                AND NEW.contract <=> OLD.contract) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: only a terminal record or an abandoned reservation can be retired';
    END IF;
    -- A terminal record is only retired (response dropped) or re-sealed
    -- under another key (same response, new body and key).
    IF OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL AND (
        CASE WHEN NEW.retired_at IS NULL THEN -- a re-seal
            NEW.resp_key IS NULL OR NEW.resp_key <=> OLD.resp_key OR NEW.tombstone_until IS NOT NULL
            OR NEW.resp_body IS NULL
            OR NOT (NEW.resp_status <=> OLD.resp_status) OR NOT (NEW.resp_media_type <=> OLD.resp_media_type)
            OR NOT (NEW.resp_location <=> OLD.resp_location) OR NOT (NEW.resp_etag <=> OLD.resp_etag)
            OR NOT (NEW.resp_digest <=> OLD.resp_digest)
        ELSE -- a retirement
            NEW.resp_status IS NOT NULL OR NEW.resp_media_type IS NOT NULL
            OR NEW.resp_location IS NOT NULL OR NEW.resp_etag IS NOT NULL
            OR NEW.resp_body IS NOT NULL OR NEW.resp_digest IS NOT NULL OR NEW.resp_key IS NOT NULL
            OR NOT (NEW.tombstone_until <=> NEW.retired_at + OLD.tombstone_ttl)
        END
        OR NOT (NEW.state <=> OLD.state)
        OR NOT (NEW.owner_gen <=> OLD.owner_gen) OR NOT (NEW.writer_epoch <=> OLD.writer_epoch)
        OR NOT (NEW.lease_until <=> OLD.lease_until) OR NOT (NEW.expires_at <=> OLD.expires_at)
        OR NOT (NEW.contract <=> OLD.contract)) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a terminal record can only be retired or re-sealed under another key';
    END IF;
END;

CREATE TRIGGER idem_operations_delete BEFORE DELETE ON idem_operations
FOR EACH ROW
BEGIN
    IF NOT ((OLD.state = 'RESERVED' AND OLD.retired_at IS NULL) OR OLD.tombstone_until IS NOT NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: only reservations and expiring tombstones can be deleted';
    END IF;
END;

CREATE TABLE idem_outbox (
    seq             BIGINT       NOT NULL AUTO_INCREMENT,
    message_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    operation_id    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic           VARCHAR(255) NOT NULL,
    payload         MEDIUMBLOB   NOT NULL,
    payload_key     VARCHAR(255) NULL,
    created_at      BIGINT       NOT NULL,
    claimed_until   BIGINT       NULL,
    published_at    BIGINT       NULL,
    attempts        INT          NOT NULL DEFAULT 0,
    last_error      TEXT         NULL,
    last_attempt_at BIGINT       NULL,
    dead_at         BIGINT       NULL,
    PRIMARY KEY (seq),
    CONSTRAINT idem_outbox_message_id UNIQUE (message_id),
    CONSTRAINT idem_outbox_attempts CHECK (attempts >= 0),
    KEY idem_outbox_pending (published_at, dead_at, seq),
    KEY idem_outbox_operation (operation_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A message is deleted only once published, with its operation's
-- expiring tombstone.
CREATE TRIGGER idem_outbox_delete BEFORE DELETE ON idem_outbox
FOR EACH ROW
BEGIN
    IF OLD.published_at IS NULL
       OR EXISTS (SELECT 1 FROM idem_operations WHERE operation_id = OLD.operation_id AND tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: an outbox message is deleted only once published, with its operation''s expiring tombstone';
    END IF;
END;

-- The control row: the writer epoch (never decreases) and the drain flag.
CREATE TABLE idem_control (
    id           INT     NOT NULL,
    writer_epoch BIGINT  NOT NULL,
    draining     TINYINT NOT NULL,
    updated_at   BIGINT  NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT idem_control_one CHECK (id = 1),
    CONSTRAINT idem_control_epoch_positive CHECK (writer_epoch >= 0),
    CONSTRAINT idem_control_draining CHECK (draining IN (0, 1))
) ENGINE=InnoDB;

INSERT INTO idem_control (id, writer_epoch, draining, updated_at)
VALUES (1, 0, 0, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED));

CREATE TRIGGER idem_control_no_delete BEFORE DELETE ON idem_control
FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: the control row cannot be removed';
END;

CREATE TRIGGER idem_control_epoch BEFORE UPDATE ON idem_control
FOR EACH ROW
BEGIN
    IF NEW.id <> OLD.id OR NEW.writer_epoch < OLD.writer_epoch THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: the writer epoch never decreases';
    END IF;
END;
