-- What operators read (issue 16, registry/audit.go and retention.go): the
-- audit log — who did what, appended before the change it announces,
-- never changed or deleted — and the newest pruning passes, of which
-- RecordPruneRun keeps registry.MaxPruneRuns. Times are Unix µs.
CREATE TABLE idem_audit (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    at            INTEGER NOT NULL,
    actor         TEXT    NOT NULL CHECK (actor <> ''),
    action        TEXT    NOT NULL CHECK (action <> ''),
    operation_id  TEXT,
    detail        TEXT    NOT NULL
) STRICT;

-- The console's page of one operation lists its entries, newest first.
CREATE INDEX idem_audit_operation ON idem_audit (operation_id, seq) WHERE operation_id IS NOT NULL;

-- The log is append-only: the database refuses every change and deletion.
CREATE TRIGGER idem_audit_no_update BEFORE UPDATE ON idem_audit
BEGIN
    SELECT RAISE(ABORT, 'idem: idem_audit is append-only');
END;
CREATE TRIGGER idem_audit_no_delete BEFORE DELETE ON idem_audit
BEGIN
    SELECT RAISE(ABORT, 'idem: idem_audit is append-only');
END;

CREATE TABLE idem_prune_runs (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    actor         TEXT    NOT NULL CHECK (actor <> ''),
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER NOT NULL,
    retired       INTEGER NOT NULL CHECK (retired >= 0),
    deleted       INTEGER NOT NULL CHECK (deleted >= 0),
    error         TEXT    NOT NULL
) STRICT;
