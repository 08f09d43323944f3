-- The rollout of each operation and its verdict counts (registry
-- RolloutStore). Statements end at a line that starts in the first
-- column and ends with ";" (migrate.go).

CREATE TABLE idem_rollouts (
    operation     VARCHAR(255) NOT NULL,
    mode          VARCHAR(16)  NULL,
    percent       INT          NOT NULL DEFAULT 0,
    by_principal  TINYINT      NOT NULL DEFAULT 0,
    allow_tenants TEXT         NOT NULL DEFAULT '[]',
    deny_tenants  TEXT         NOT NULL DEFAULT '[]',
    forced        TINYINT      NOT NULL DEFAULT 0,
    enforced_at   BIGINT       NULL,
    version       BIGINT       NOT NULL,
    updated_at    BIGINT       NOT NULL,
    updated_by    VARCHAR(255) NOT NULL,
    PRIMARY KEY (operation),
    CONSTRAINT idem_rollouts_operation CHECK (operation <> ''),
    CONSTRAINT idem_rollouts_mode CHECK (mode IN ('off', 'shadow', 'enforce')),
    CONSTRAINT idem_rollouts_percent CHECK (percent BETWEEN 0 AND 100),
    CONSTRAINT idem_rollouts_by_principal CHECK (by_principal IN (0, 1)),
    CONSTRAINT idem_rollouts_allow CHECK (JSON_VALID(allow_tenants) AND LEFT(allow_tenants, 1) = '['),
    CONSTRAINT idem_rollouts_deny CHECK (JSON_VALID(deny_tenants) AND LEFT(deny_tenants, 1) = '['),
    CONSTRAINT idem_rollouts_forced CHECK (forced IN (0, 1)),
    CONSTRAINT idem_rollouts_version CHECK (version >= 1),
    CONSTRAINT idem_rollouts_forced_off CHECK (forced = 0 OR mode <=> 'off'),
    CONSTRAINT idem_rollouts_guard CHECK (NOT (mode = 'off' AND enforced_at IS NOT NULL AND forced = 0))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TRIGGER idem_rollouts_enforced_at BEFORE UPDATE ON idem_rollouts
FOR EACH ROW
BEGIN
    IF OLD.enforced_at IS NOT NULL AND NOT (NEW.enforced_at <=> OLD.enforced_at) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a rollout''s enforced_at never changes once set';
    END IF;
END;

CREATE TRIGGER idem_rollouts_no_delete BEFORE DELETE ON idem_rollouts
FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: rollout rows are never deleted';
END;

CREATE TABLE idem_rollout_verdicts (
    operation  VARCHAR(255) NOT NULL,
    tenant     VARCHAR(255) NOT NULL,
    mode       VARCHAR(16)  NOT NULL,
    verdict    VARCHAR(32)  NOT NULL,
    n          BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL,
    PRIMARY KEY (operation, tenant, mode, verdict),
    CONSTRAINT idem_rollout_verdicts_mode CHECK (mode <> ''),
    CONSTRAINT idem_rollout_verdicts_verdict CHECK (verdict <> ''),
    CONSTRAINT idem_rollout_verdicts_n CHECK (n >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TRIGGER idem_rollout_verdicts_monotonic BEFORE UPDATE ON idem_rollout_verdicts
FOR EACH ROW
BEGIN
    IF NEW.n < OLD.n THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a verdict count never decreases';
    END IF;
END;

-- TRUNCATE of the rollouts is refused as of the evidence tables
-- (migration 003).
ALTER TABLE idem_truncate_guard
    ADD COLUMN rollout_operation VARCHAR(255) NULL,
    ADD COLUMN verdict_operation VARCHAR(255) NULL,
    ADD COLUMN verdict_tenant VARCHAR(255) NULL,
    ADD COLUMN verdict_mode VARCHAR(16) NULL,
    ADD COLUMN verdict_verdict VARCHAR(32) NULL,
    ADD CONSTRAINT idem_truncate_guard_rollouts FOREIGN KEY (rollout_operation) REFERENCES idem_rollouts (operation),
    ADD CONSTRAINT idem_truncate_guard_verdicts FOREIGN KEY (verdict_operation, verdict_tenant, verdict_mode, verdict_verdict)
        REFERENCES idem_rollout_verdicts (operation, tenant, mode, verdict),
    ADD CONSTRAINT idem_truncate_guard_empty_rollouts CHECK (rollout_operation IS NULL AND verdict_operation IS NULL);
