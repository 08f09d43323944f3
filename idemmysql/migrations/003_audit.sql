-- The audit log, the prune runs, the downstream lookups and the
-- settlements waiting for a second operator, with the rules the other
-- engines enforce; and a guard against TRUNCATE, which MySQL runs without
-- firing DELETE triggers. Statements end at a line that starts in the
-- first column and ends with ";" (migrate.go).

CREATE TABLE idem_audit (
    seq          BIGINT       NOT NULL AUTO_INCREMENT,
    at           BIGINT       NOT NULL,
    actor        VARCHAR(255) NOT NULL,
    action       VARCHAR(255) NOT NULL,
    operation_id VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    detail       TEXT         NOT NULL,
    PRIMARY KEY (seq),
    KEY idem_audit_operation (operation_id, seq),
    CONSTRAINT idem_audit_actor CHECK (actor <> ''),
    CONSTRAINT idem_audit_action CHECK (action <> '')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TRIGGER idem_audit_no_update BEFORE UPDATE ON idem_audit
FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: idem_audit is append-only';
END;

CREATE TRIGGER idem_audit_no_delete BEFORE DELETE ON idem_audit
FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: idem_audit is append-only';
END;

CREATE TABLE idem_prune_runs (
    seq         BIGINT       NOT NULL AUTO_INCREMENT,
    actor       VARCHAR(255) NOT NULL,
    started_at  BIGINT       NOT NULL,
    finished_at BIGINT       NOT NULL,
    retired     BIGINT       NOT NULL,
    deleted     BIGINT       NOT NULL,
    error       TEXT         NOT NULL,
    PRIMARY KEY (seq),
    CONSTRAINT idem_prune_runs_actor CHECK (actor <> ''),
    CONSTRAINT idem_prune_runs_counts CHECK (retired >= 0 AND deleted >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Only runs older than the newest 100 are deleted (RecordPruneRun).
CREATE TRIGGER idem_prune_runs_delete BEFORE DELETE ON idem_prune_runs
FOR EACH ROW
BEGIN
    IF (SELECT count(*) FROM (SELECT 1 FROM idem_prune_runs WHERE seq > OLD.seq LIMIT 100) AS newer) < 100 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: only prune runs older than the newest 100 are deleted';
    END IF;
END;

CREATE TABLE idem_effect_lookups (
    seq            BIGINT       NOT NULL AUTO_INCREMENT,
    operation_id   VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    effect         VARCHAR(255) NOT NULL,
    downstream_key VARCHAR(512) NOT NULL,
    answer         VARCHAR(32)  NOT NULL,
    handle         TEXT         NOT NULL,
    detail         TEXT         NOT NULL,
    actor          VARCHAR(255) NOT NULL,
    at             BIGINT       NOT NULL,
    PRIMARY KEY (seq),
    KEY idem_effect_lookups_operation (operation_id, seq),
    CONSTRAINT idem_effect_lookups_nonempty CHECK (operation_id <> '' AND effect <> '' AND downstream_key <> '' AND actor <> ''),
    CONSTRAINT idem_effect_lookups_answer CHECK (answer IN ('executed', 'declined', 'not found', 'not found, voided', 'no answer'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TRIGGER idem_effect_lookups_no_update BEFORE UPDATE ON idem_effect_lookups
FOR EACH ROW
BEGIN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: idem_effect_lookups is append-only';
END;

CREATE TRIGGER idem_effect_lookups_delete BEFORE DELETE ON idem_effect_lookups
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations o WHERE o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: idem_effect_lookups keeps every row of a live operation';
    END IF;
END;

CREATE TABLE idem_pending_settlements (
    operation_id VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    outcome      VARCHAR(16)  NOT NULL,
    handle       TEXT         NOT NULL,
    evidence     TEXT         NOT NULL,
    requested_by VARCHAR(255) NOT NULL,
    requested_at BIGINT       NOT NULL,
    approved_by  VARCHAR(255) NULL,
    approved_at  BIGINT       NULL,
    PRIMARY KEY (operation_id),
    CONSTRAINT idem_pending_settlements_id CHECK (operation_id <> ''),
    CONSTRAINT idem_pending_settlements_outcome CHECK (outcome IN ('succeeded', 'failed')),
    CONSTRAINT idem_pending_settlements_evidence CHECK (evidence <> ''),
    CONSTRAINT idem_pending_settlements_requester CHECK (requested_by <> ''),
    CONSTRAINT idem_pending_settlements_approver CHECK (approved_by <> '' AND approved_by <> requested_by),
    CONSTRAINT idem_pending_settlements_approval CHECK ((approved_by IS NULL) = (approved_at IS NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TRIGGER idem_pending_settlements_update BEFORE UPDATE ON idem_pending_settlements
FOR EACH ROW
BEGIN
    IF NOT (NEW.operation_id <=> OLD.operation_id AND NEW.outcome <=> OLD.outcome AND NEW.handle <=> OLD.handle
            AND NEW.evidence <=> OLD.evidence AND NEW.requested_by <=> OLD.requested_by
            AND NEW.requested_at <=> OLD.requested_at)
       OR OLD.approved_by IS NOT NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a pending settlement only gets its approver, once';
    END IF;
END;

CREATE TRIGGER idem_pending_settlements_delete BEFORE DELETE ON idem_pending_settlements
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations o WHERE o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: idem_pending_settlements keeps every row of a live operation';
    END IF;
END;

-- TRUNCATE fires no trigger; InnoDB refuses it on a table that another
-- table's foreign key references (error 1701), whatever the rows. This
-- table holds no row: it only references the tables whose rows are
-- evidence.
CREATE TABLE idem_truncate_guard (
    operation_scope   BINARY(32) NULL,
    outbox_seq        BIGINT     NULL,
    audit_seq         BIGINT     NULL,
    reconciliation_id BIGINT     NULL,
    lookup_seq        BIGINT     NULL,
    effect_operation  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    effect_name       VARCHAR(255) NULL,
    pending_operation VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    prune_run_seq     BIGINT     NULL,
    CONSTRAINT idem_truncate_guard_operations FOREIGN KEY (operation_scope) REFERENCES idem_operations (scope),
    CONSTRAINT idem_truncate_guard_outbox FOREIGN KEY (outbox_seq) REFERENCES idem_outbox (seq),
    CONSTRAINT idem_truncate_guard_audit FOREIGN KEY (audit_seq) REFERENCES idem_audit (seq),
    CONSTRAINT idem_truncate_guard_reconciliations FOREIGN KEY (reconciliation_id) REFERENCES idem_reconciliations (id),
    CONSTRAINT idem_truncate_guard_lookups FOREIGN KEY (lookup_seq) REFERENCES idem_effect_lookups (seq),
    CONSTRAINT idem_truncate_guard_effects FOREIGN KEY (effect_operation, effect_name) REFERENCES idem_effects (operation_id, name),
    CONSTRAINT idem_truncate_guard_pending FOREIGN KEY (pending_operation) REFERENCES idem_pending_settlements (operation_id),
    CONSTRAINT idem_truncate_guard_prune_runs FOREIGN KEY (prune_run_seq) REFERENCES idem_prune_runs (seq),
    CONSTRAINT idem_truncate_guard_empty CHECK (operation_scope IS NULL AND outbox_seq IS NULL AND audit_seq IS NULL
        AND reconciliation_id IS NULL AND lookup_seq IS NULL AND effect_operation IS NULL
        AND pending_operation IS NULL AND prune_run_seq IS NULL)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
