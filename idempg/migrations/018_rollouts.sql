-- Rollout per operation (issue 23, registry/rollout.go): the stage each
-- operation is in (off, shadow, enforce with a ramp), changed by
-- operators with a compare-and-set on version, and the verdict counts
-- that say what enforce answered or would have answered. allow_tenants
-- and deny_tenants are JSON arrays of text, kept as text.
--
-- The database keeps the guard's rules itself, so that a writer going
-- around the Store cannot unguard an operation that was enforced:
-- * mode is off, shadow or enforce, or NULL (no operator set one: the row
--   exists because an instance enforced the operation, MarkEnforced);
-- * percent is 0 to 100, version at least 1;
-- * forced only with mode off, and off on an operation that was enforced
--   (enforced_at set) only when forced;
-- * enforced_at, once set, never changes and is never cleared;
-- * a row is never deleted, nor the table truncated: that would make an
--   enforced operation look never enforced. (TRUNCATE fires no row
--   trigger, hence a statement trigger, as in 015.)
CREATE TABLE idem_rollouts (
    operation      text        PRIMARY KEY CHECK (operation <> ''),
    mode           text        CHECK (mode IN ('off', 'shadow', 'enforce')),
    percent        integer     NOT NULL DEFAULT 0 CHECK (percent BETWEEN 0 AND 100),
    by_principal   boolean     NOT NULL DEFAULT false,
    allow_tenants  text        NOT NULL DEFAULT '[]' CHECK (json_typeof(allow_tenants::json) = 'array'),
    deny_tenants   text        NOT NULL DEFAULT '[]' CHECK (json_typeof(deny_tenants::json) = 'array'),
    forced         boolean     NOT NULL DEFAULT false,
    enforced_at    timestamptz,
    version        bigint      NOT NULL CHECK (version >= 1),
    updated_at     timestamptz NOT NULL,
    updated_by     text        NOT NULL,
    CONSTRAINT idem_rollouts_forced_off CHECK (NOT forced OR mode IS NOT DISTINCT FROM 'off'),
    CONSTRAINT idem_rollouts_guard CHECK (NOT (mode IS NOT DISTINCT FROM 'off' AND enforced_at IS NOT NULL AND NOT forced))
);

CREATE FUNCTION idem_rollouts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.enforced_at IS NOT NULL AND NEW.enforced_at IS DISTINCT FROM OLD.enforced_at THEN
            RAISE EXCEPTION 'idem: a rollout''s enforced_at never changes once set'
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'idem: rollout rows are never deleted' USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER idem_rollouts_guard BEFORE UPDATE OR DELETE ON idem_rollouts
    FOR EACH ROW EXECUTE FUNCTION idem_rollouts_guard();
CREATE TRIGGER idem_rollouts_no_truncate BEFORE TRUNCATE ON idem_rollouts
    FOR EACH STATEMENT EXECUTE FUNCTION idem_no_truncate();

-- Verdict totals per (operation, tenant, mode, verdict): statistics
-- flushed by each instance (AddVerdicts); a total never decreases.
CREATE TABLE idem_rollout_verdicts (
    operation   text        NOT NULL,
    tenant      text        NOT NULL,
    mode        text        NOT NULL CHECK (mode <> ''),
    verdict     text        NOT NULL CHECK (verdict <> ''),
    n           bigint      NOT NULL CHECK (n >= 0),
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (operation, tenant, mode, verdict)
);

CREATE FUNCTION idem_rollout_verdicts_monotonic() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.n < OLD.n THEN
        RAISE EXCEPTION 'idem: a verdict count never decreases' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER idem_rollout_verdicts_monotonic BEFORE UPDATE ON idem_rollout_verdicts
    FOR EACH ROW EXECUTE FUNCTION idem_rollout_verdicts_monotonic();
