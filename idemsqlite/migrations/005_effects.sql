-- Effects outside the database and the reconciliation of unknown outcomes
-- (SPEC E1–E2). effects.sql reads and writes these tables. Times are
-- INTEGER microseconds since the Unix epoch, as everywhere.
--
-- idem_effects: one row per effect attempt of an operation, written and
-- committed before the downstream call. downstream_key is derived from
-- (operation_id, name) (registry.DownstreamKey) and never changes; the
-- trigger below refuses any change of it, of the identity columns, and any
-- lowering of owner_gen. There is no foreign key to idem_operations: a
-- record and its effects are kept and pruned together by the retention
-- code, which must delete an operation's effect rows with its record.

CREATE TABLE idem_effects (
    operation_id   TEXT    NOT NULL,
    name           TEXT    NOT NULL CHECK (name <> ''),
    downstream_key TEXT    NOT NULL UNIQUE CHECK (downstream_key <> ''),
    owner_gen      INTEGER NOT NULL CHECK (owner_gen >= 1),
    handle         TEXT    NULL,
    result         TEXT    NULL CHECK (result IN ('succeeded', 'failed')),
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (operation_id, name)
) STRICT;

CREATE TRIGGER idem_effects_guard BEFORE UPDATE ON idem_effects
WHEN NEW.operation_id IS NOT OLD.operation_id OR NEW.name IS NOT OLD.name
  OR NEW.downstream_key IS NOT OLD.downstream_key OR NEW.created_at IS NOT OLD.created_at
  OR NEW.owner_gen < OLD.owner_gen
BEGIN
    SELECT RAISE(ABORT, 'idem: an effect''s key and identity never change and owner_gen never decreases');
END;

-- idem_reconciliations: the log of how UNKNOWN operations were resolved,
-- written in the transaction that stores the outcome. Rows are never
-- changed (deleting them, with their record, is the retention code's).
CREATE TABLE idem_reconciliations (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT    NOT NULL,
    outcome      TEXT    NOT NULL CHECK (outcome IN ('SUCCEEDED', 'FAILED_FINAL')),
    method       TEXT    NOT NULL CHECK (method IN ('provider', 'replay', 'operator')),
    actor        TEXT    NOT NULL CHECK (actor <> ''),
    evidence     TEXT    NOT NULL CHECK (evidence <> ''),
    created_at   INTEGER NOT NULL
) STRICT;

CREATE INDEX idem_reconciliations_operation ON idem_reconciliations (operation_id, id);

CREATE TRIGGER idem_reconciliations_append_only BEFORE UPDATE ON idem_reconciliations
BEGIN
    SELECT RAISE(ABORT, 'idem: the reconciliation log is append-only');
END;

-- UNKNOWN records by age, for ListOperations ("idem ops list --state
-- UNKNOWN") and recovery. Partial: it holds the few UNKNOWN rows only, so
-- the hot path (Reserve, Complete) never writes it. (The list statement
-- repeats its WHERE term verbatim: SQLite uses a partial index only then.)
CREATE INDEX idem_operations_unknown_age ON idem_operations (created_at, operation_id)
    WHERE state = 'UNKNOWN';
