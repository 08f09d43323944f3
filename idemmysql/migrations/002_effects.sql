-- Effects outside the database and their reconciliation (registry
-- EffectStore): one row per effect attempt of an operation, with its
-- stable downstream key, and the append-only log of reconciliations.
-- Statements end at a line that starts in the first column and ends
-- with ";" (migrate.go).

CREATE TABLE idem_effects (
    operation_id   VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name           VARCHAR(255) NOT NULL,
    downstream_key VARCHAR(512) NOT NULL,
    owner_gen      BIGINT       NOT NULL,
    handle         TEXT         NULL,
    result         VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    created_at     BIGINT       NOT NULL,
    updated_at     BIGINT       NOT NULL,
    request        MEDIUMBLOB   NULL,
    answer         MEDIUMBLOB   NULL,
    request_key    VARCHAR(255) NULL,
    answer_key     VARCHAR(255) NULL,
    PRIMARY KEY (operation_id, name),
    CONSTRAINT idem_effects_downstream_key UNIQUE (downstream_key),
    CONSTRAINT idem_effects_name CHECK (name <> ''),
    CONSTRAINT idem_effects_key_nonempty CHECK (downstream_key <> ''),
    CONSTRAINT idem_effects_owner_gen CHECK (owner_gen >= 1),
    CONSTRAINT idem_effects_result CHECK (result IN ('succeeded', 'failed')),
    CONSTRAINT idem_effects_request_key CHECK (request_key IS NULL OR request IS NOT NULL),
    CONSTRAINT idem_effects_answer_key CHECK (answer_key IS NULL OR answer IS NOT NULL)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- An effect's key, request and identity never change (a request changes
-- only when re-sealed under another key) and owner_gen never decreases.
CREATE TRIGGER idem_effects_guard BEFORE UPDATE ON idem_effects
FOR EACH ROW
BEGIN
    IF NOT (NEW.operation_id <=> OLD.operation_id AND NEW.name <=> OLD.name
            AND NEW.downstream_key <=> OLD.downstream_key AND NEW.created_at <=> OLD.created_at)
       OR NEW.owner_gen < OLD.owner_gen
       OR (OLD.request IS NOT NULL AND NOT (NEW.request <=> OLD.request)
           AND (NEW.request_key IS NULL OR NEW.request_key <=> OLD.request_key)) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: an effect''s key, request and identity never change and owner_gen never decreases';
    END IF;
END;

CREATE TRIGGER idem_effects_delete BEFORE DELETE ON idem_effects
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations WHERE operation_id = OLD.operation_id AND tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: an effect attempt is deleted only with its operation''s expiring tombstone';
    END IF;
END;

-- An abandoned reservation that began an effect is not retired: its
-- outcome downstream is not known (the rest of the rule is in
-- idem_operations_update, migration 001).
CREATE TRIGGER idem_operations_retire_effects BEFORE UPDATE ON idem_operations
FOR EACH ROW
BEGIN
    IF OLD.state IN ('RESERVED', 'EXECUTING') AND OLD.retired_at IS NULL AND NEW.retired_at IS NOT NULL
       AND EXISTS (SELECT 1 FROM idem_effects x WHERE x.operation_id = OLD.operation_id) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: only a terminal record or an abandoned reservation can be retired';
    END IF;
END;

CREATE TABLE idem_reconciliations (
    id           BIGINT      NOT NULL AUTO_INCREMENT,
    operation_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    outcome      VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    method       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    actor        TEXT        NOT NULL,
    evidence     TEXT        NOT NULL,
    created_at   BIGINT      NOT NULL,
    PRIMARY KEY (id),
    KEY idem_reconciliations_operation (operation_id, id),
    CONSTRAINT idem_reconciliations_outcome CHECK (outcome IN ('SUCCEEDED', 'FAILED_FINAL')),
    CONSTRAINT idem_reconciliations_method CHECK (method IN ('provider', 'replay', 'operator')),
    CONSTRAINT idem_reconciliations_actor CHECK (actor <> ''),
    CONSTRAINT idem_reconciliations_evidence CHECK (evidence <> '')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TRIGGER idem_reconciliations_append_only BEFORE UPDATE ON idem_reconciliations
FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: the reconciliation log is append-only';
END;

CREATE TRIGGER idem_reconciliations_delete BEFORE DELETE ON idem_reconciliations
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations WHERE operation_id = OLD.operation_id AND tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a reconciliation is deleted only with its operation''s expiring tombstone';
    END IF;
END;

CREATE INDEX idem_operations_state_age ON idem_operations (state, created_at, operation_id);
