-- Effects outside the database and the reconciliation of unknown outcomes
-- (SPEC E1–E2). effects.sql reads and writes these tables.
--
-- idem_effects: one row per effect attempt of an operation, written and
-- committed before the downstream call. downstream_key is derived from
-- (operation_id, name) (registry.DownstreamKey) and never changes; the
-- trigger below refuses any change of it, of the identity columns, and any
-- lowering of owner_gen. There is no foreign key to idem_operations: a
-- record and its effects are kept and pruned together by the retention
-- code, which must delete an operation's effect rows with its record.

CREATE TABLE idem_effects (
    operation_id   text        NOT NULL,
    name           text        NOT NULL CHECK (name <> ''),
    downstream_key text        NOT NULL UNIQUE CHECK (downstream_key <> ''),
    owner_gen      bigint      NOT NULL CHECK (owner_gen >= 1),
    handle         text        NULL,
    result         text        NULL CHECK (result IN ('succeeded', 'failed')),
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (operation_id, name)
);

CREATE FUNCTION idem_effects_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.operation_id <> OLD.operation_id OR NEW.name <> OLD.name
       OR NEW.downstream_key <> OLD.downstream_key OR NEW.created_at <> OLD.created_at
       OR NEW.owner_gen < OLD.owner_gen THEN
        RAISE EXCEPTION 'idem: an effect''s key and identity never change and owner_gen never decreases'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER idem_effects_guard BEFORE UPDATE ON idem_effects
    FOR EACH ROW EXECUTE FUNCTION idem_effects_guard();

-- idem_reconciliations: the log of how UNKNOWN operations were resolved,
-- written in the transaction that stores the outcome. Rows are never
-- changed (deleting them, with their record, is the retention code's).
CREATE TABLE idem_reconciliations (
    id           bigserial   PRIMARY KEY,
    operation_id text        NOT NULL,
    outcome      text        NOT NULL CHECK (outcome IN ('SUCCEEDED', 'FAILED_FINAL')),
    method       text        NOT NULL CHECK (method IN ('provider', 'replay', 'operator')),
    actor        text        NOT NULL CHECK (actor <> ''),
    evidence     text        NOT NULL CHECK (evidence <> ''),
    created_at   timestamptz NOT NULL
);

CREATE INDEX idem_reconciliations_operation ON idem_reconciliations (operation_id, id);

CREATE FUNCTION idem_reconciliations_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'idem: the reconciliation log is append-only'
        USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER idem_reconciliations_guard BEFORE UPDATE ON idem_reconciliations
    FOR EACH ROW EXECUTE FUNCTION idem_reconciliations_guard();

-- UNKNOWN records by age, for ListOperations ("idem ops list --state
-- UNKNOWN") and recovery. Partial: it holds the few UNKNOWN rows only, so
-- the hot path (Reserve, Complete) never writes it.
CREATE INDEX idem_operations_unknown_age ON idem_operations (created_at, operation_id)
    WHERE state = 'UNKNOWN';
