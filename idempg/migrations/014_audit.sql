-- What operators read (issue 16, registry/audit.go and retention.go): the
-- audit log — who did what, appended before the change it announces,
-- never changed or deleted — and the newest pruning passes, of which
-- RecordPruneRun keeps registry.MaxPruneRuns.
CREATE TABLE idem_audit (
    seq           bigserial   PRIMARY KEY,
    at            timestamptz NOT NULL,
    actor         text        NOT NULL CHECK (actor <> ''),
    action        text        NOT NULL CHECK (action <> ''),
    operation_id  text,
    detail        text        NOT NULL
);

-- The console's page of one operation lists its entries, newest first.
CREATE INDEX idem_audit_operation ON idem_audit (operation_id, seq) WHERE operation_id IS NOT NULL;

-- The log is append-only: the database refuses every change and deletion,
-- TRUNCATE included.
CREATE FUNCTION idem_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'idem_audit is append-only' USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER idem_audit_append_only BEFORE UPDATE OR DELETE ON idem_audit
    FOR EACH ROW EXECUTE FUNCTION idem_audit_append_only();
CREATE TRIGGER idem_audit_no_truncate BEFORE TRUNCATE ON idem_audit
    FOR EACH STATEMENT EXECUTE FUNCTION idem_audit_append_only();

CREATE TABLE idem_prune_runs (
    seq           bigserial   PRIMARY KEY,
    actor         text        NOT NULL CHECK (actor <> ''),
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL,
    retired       bigint      NOT NULL CHECK (retired >= 0),
    deleted       bigint      NOT NULL CHECK (deleted >= 0),
    error         text        NOT NULL
);
