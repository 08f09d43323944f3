-- Recovery attempts (registry/attempts.go): the same table as idempg's
-- migration 024 (see there). Display only.
CREATE TABLE idem_recovery_attempts (
    operation_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    attempts     BIGINT      NOT NULL,
    last_error   TEXT        NOT NULL,
    attempted_ms BIGINT      NOT NULL,
    next_ms      BIGINT      NOT NULL,
    CONSTRAINT idem_recovery_attempts_id CHECK (operation_id <> ''),
    CONSTRAINT idem_recovery_attempts_attempts CHECK (attempts > 0)
);
