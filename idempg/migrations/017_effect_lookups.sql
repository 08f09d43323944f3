-- What an operator's decision is checked against (issue 22,
-- registry/lookups.go): every downstream lookup of an effect, by whoever
-- asked, and the settlements that wait for a second operator.
--
-- idem_effect_lookups is append-only: the database refuses every change,
-- and a deletion unless the operation is retired (a tombstone) or gone —
-- prune deletes an operation's lookups with its tombstone. TRUNCATE is
-- refused.
CREATE TABLE idem_effect_lookups (
    seq            bigserial   PRIMARY KEY,
    operation_id   text        NOT NULL CHECK (operation_id <> ''),
    effect         text        NOT NULL CHECK (effect <> ''),
    downstream_key text        NOT NULL CHECK (downstream_key <> ''),
    answer         text        NOT NULL CHECK (answer IN ('executed', 'declined', 'not found', 'not found, voided', 'no answer')),
    handle         text        NOT NULL,
    detail         text        NOT NULL,
    actor          text        NOT NULL CHECK (actor <> ''),
    at             timestamptz NOT NULL
);

CREATE INDEX idem_effect_lookups_operation ON idem_effect_lookups (operation_id, seq);

-- idem_pending_settlements: at most one request per operation. Its fields
-- never change; the approver is set once, never to the requester.
CREATE TABLE idem_pending_settlements (
    operation_id text        PRIMARY KEY CHECK (operation_id <> ''),
    outcome      text        NOT NULL CHECK (outcome IN ('succeeded', 'failed')),
    handle       text        NOT NULL,
    evidence     text        NOT NULL CHECK (evidence <> ''),
    requested_by text        NOT NULL CHECK (requested_by <> ''),
    requested_at timestamptz NOT NULL,
    approved_by  text        NULL CHECK (approved_by <> '' AND approved_by <> requested_by),
    approved_at  timestamptz NULL,
    CHECK ((approved_by IS NULL) = (approved_at IS NULL))
);

-- A row may be deleted only when its operation is retired or gone:
-- idem_evidence_delete_guard (migration 015), as for effects.

CREATE FUNCTION idem_evidence_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'idem: % is append-only', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;

-- The approver is set once; nothing else ever changes.
CREATE FUNCTION idem_pending_settlements_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.operation_id <> OLD.operation_id OR NEW.outcome <> OLD.outcome OR NEW.handle <> OLD.handle
       OR NEW.evidence <> OLD.evidence OR NEW.requested_by <> OLD.requested_by
       OR NEW.requested_at <> OLD.requested_at OR OLD.approved_by IS NOT NULL THEN
        RAISE EXCEPTION 'idem: a pending settlement only gets its approver, once'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER idem_effect_lookups_no_update BEFORE UPDATE ON idem_effect_lookups
    FOR EACH ROW EXECUTE FUNCTION idem_evidence_append_only();
CREATE TRIGGER idem_effect_lookups_delete BEFORE DELETE ON idem_effect_lookups
    FOR EACH ROW EXECUTE FUNCTION idem_evidence_delete_guard();
CREATE TRIGGER idem_effect_lookups_no_truncate BEFORE TRUNCATE ON idem_effect_lookups
    FOR EACH STATEMENT EXECUTE FUNCTION idem_evidence_append_only();
CREATE TRIGGER idem_pending_settlements_update BEFORE UPDATE ON idem_pending_settlements
    FOR EACH ROW EXECUTE FUNCTION idem_pending_settlements_guard();
CREATE TRIGGER idem_pending_settlements_delete BEFORE DELETE ON idem_pending_settlements
    FOR EACH ROW EXECUTE FUNCTION idem_evidence_delete_guard();
CREATE TRIGGER idem_pending_settlements_no_truncate BEFORE TRUNCATE ON idem_pending_settlements
    FOR EACH STATEMENT EXECUTE FUNCTION idem_evidence_append_only();
