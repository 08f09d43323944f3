-- Rollout per operation (issue 23, registry/rollout.go): the stage each
-- operation is in (off, shadow, enforce with a ramp), changed by
-- operators with a compare-and-set on version, and the verdict counts
-- that say what enforce answered or would have answered. Times are Unix
-- µs; allow_tenants and deny_tenants are JSON arrays of text.
--
-- The database keeps the guard's rules itself, so that a writer going
-- around the Store cannot unguard an operation that was enforced:
-- * mode is off, shadow or enforce, or NULL (no operator set one: the row
--   exists because an instance enforced the operation, MarkEnforced);
-- * percent is 0 to 100, version at least 1;
-- * forced only with mode off, and off on an operation that was enforced
--   (enforced_at set) only when forced;
-- * enforced_at, once set, never changes and is never cleared
--   (idem_rollouts_enforced_at);
-- * a row is never deleted (idem_rollouts_no_delete): deleting it would
--   make an enforced operation look never enforced. SQLite has no
--   TRUNCATE; DELETE without WHERE runs row by row when the table has a
--   DELETE trigger, so the trigger refuses it too.
CREATE TABLE idem_rollouts (
    operation      TEXT    PRIMARY KEY CHECK (operation <> ''),
    mode           TEXT    CHECK (mode IN ('off', 'shadow', 'enforce')),
    percent        INTEGER NOT NULL DEFAULT 0 CHECK (percent BETWEEN 0 AND 100),
    by_principal   INTEGER NOT NULL DEFAULT 0 CHECK (by_principal IN (0, 1)),
    allow_tenants  TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(allow_tenants) AND json_type(allow_tenants) = 'array'),
    deny_tenants   TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(deny_tenants) AND json_type(deny_tenants) = 'array'),
    forced         INTEGER NOT NULL DEFAULT 0 CHECK (forced IN (0, 1)),
    enforced_at    INTEGER,
    version        INTEGER NOT NULL CHECK (version >= 1),
    updated_at     INTEGER NOT NULL,
    updated_by     TEXT    NOT NULL,
    CONSTRAINT idem_rollouts_forced_off CHECK (forced = 0 OR mode IS 'off'),
    CONSTRAINT idem_rollouts_guard CHECK (NOT (mode = 'off' AND enforced_at IS NOT NULL AND forced = 0))
) STRICT;

CREATE TRIGGER idem_rollouts_enforced_at BEFORE UPDATE ON idem_rollouts
WHEN OLD.enforced_at IS NOT NULL AND NEW.enforced_at IS NOT OLD.enforced_at
BEGIN
    SELECT RAISE(ABORT, 'idem: a rollout''s enforced_at never changes once set');
END;

CREATE TRIGGER idem_rollouts_no_delete BEFORE DELETE ON idem_rollouts
BEGIN
    SELECT RAISE(ABORT, 'idem: rollout rows are never deleted');
END;

-- Verdict totals per (operation, tenant, mode, verdict): statistics
-- flushed by each instance (AddVerdicts); a total never decreases.
CREATE TABLE idem_rollout_verdicts (
    operation   TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    mode        TEXT    NOT NULL CHECK (mode <> ''),
    verdict     TEXT    NOT NULL CHECK (verdict <> ''),
    n           INTEGER NOT NULL CHECK (n >= 0),
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (operation, tenant, mode, verdict)
) STRICT;

CREATE TRIGGER idem_rollout_verdicts_monotonic BEFORE UPDATE ON idem_rollout_verdicts
WHEN NEW.n < OLD.n
BEGIN
    SELECT RAISE(ABORT, 'idem: a verdict count never decreases');
END;
