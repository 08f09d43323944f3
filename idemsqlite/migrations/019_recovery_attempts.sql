-- Recovery attempts (registry/attempts.go): the same table as idempg's
-- migration 024 (see there). Display only.
CREATE TABLE idem_recovery_attempts (
    operation_id TEXT    PRIMARY KEY CHECK (operation_id <> ''),
    attempts     INTEGER NOT NULL CHECK (attempts > 0),
    last_error   TEXT    NOT NULL,
    attempted_ms INTEGER NOT NULL,
    next_ms      INTEGER NOT NULL
) STRICT;
