-- Tenants (registry/tenant.go): which tenant each record is of, and the
-- fence that stops every write to a moving tenant's records — rule for
-- rule what idempg's migration 020 and idemsqlite's 015 hold.
--
-- 1. tenant_hash is registry.TenantHash of the claim's tenant — a
--    SHA-256, never the tenant itself, so a tenant of any bytes is 32
--    bytes here. NULL for records made before this migration
--    ("unattributed"). It never changes (idem_operations_tenant_update
--    refuses it). idem_operations_tenant serves the tenant queries
--    (tenant.sql): a tenant's records, by state. VARBINARY, not BINARY:
--    BINARY pads a short value with zero bytes to 32, which the CHECK
--    would then pass.
ALTER TABLE idem_operations ADD COLUMN tenant_hash VARBINARY(32) NULL,
    ADD CONSTRAINT idem_operations_tenant_hash CHECK (tenant_hash IS NULL OR length(tenant_hash) = 32),
    ADD KEY idem_operations_tenant (tenant_hash, state);

-- 2. The fence (registry.TenantMover.FenceTenant): one row per fenced
--    tenant, naming where it moved. While the row exists the database
--    refuses, with SIGNAL SQLSTATE 'IDM03' (the driver's
--    registry.ErrTenantMoved), every write that could change an outcome
--    of the tenant:
--    * INSERT of a record of the tenant (Reserve, the in-transaction
--      claim, ExecuteOnce's outcome);
--    * UPDATE of its records in flight or UNKNOWN (Complete, TakeOver,
--      ExtendLease, MarkUnknown, Reconcile), except their retirement,
--      and their DELETE (Release);
--    * INSERT and UPDATE of the rows hanging off its operations: effects,
--      lookups, reconciliations, pending settlements, and INSERT of
--      outbox messages.
--    A settled record's only changes (retirement, a re-seal) and the
--    deletions of retention go on; reads are never refused. The check is
--    the database's own, so a server whose shard map is stale cannot
--    write through it, whatever statement it sends.
CREATE TABLE idem_tenant_fences (
    tenant_hash VARBINARY(32) NOT NULL,
    moved_to    TEXT         NOT NULL,
    fenced_at   BIGINT       NOT NULL,
    PRIMARY KEY (tenant_hash),
    CONSTRAINT idem_tenant_fences_hash CHECK (length(tenant_hash) = 32)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TRIGGER idem_operations_tenant_insert BEFORE INSERT ON idem_operations
FOR EACH ROW
BEGIN
    IF NEW.tenant_hash IS NOT NULL
       AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = NEW.tenant_hash) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_operations_tenant_update BEFORE UPDATE ON idem_operations
FOR EACH ROW
BEGIN
    IF NOT (NEW.tenant_hash <=> OLD.tenant_hash) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a record''s tenant never changes';
    END IF;
    -- Retention and re-seals change no outcome: a settled or retired
    -- record, or a retirement.
    IF OLD.state NOT IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL
       AND NEW.retired_at IS NULL AND NEW.tenant_hash IS NOT NULL
       AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = NEW.tenant_hash) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_operations_tenant_delete BEFORE DELETE ON idem_operations
FOR EACH ROW
BEGIN
    IF OLD.state IN ('RESERVED', 'EXECUTING', 'UNKNOWN') AND OLD.retired_at IS NULL
       AND OLD.tenant_hash IS NOT NULL
       AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = OLD.tenant_hash) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

-- The rows of an operation: fenced with their record's tenant (a trigger
-- holds one event, so one trigger per table and event).
CREATE TRIGGER idem_effects_tenant_insert BEFORE INSERT ON idem_effects
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_effects_tenant_update BEFORE UPDATE ON idem_effects
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_effect_lookups_tenant_insert BEFORE INSERT ON idem_effect_lookups
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_reconciliations_tenant_insert BEFORE INSERT ON idem_reconciliations
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_pending_settlements_tenant_insert BEFORE INSERT ON idem_pending_settlements
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_pending_settlements_tenant_update BEFORE UPDATE ON idem_pending_settlements
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

CREATE TRIGGER idem_outbox_tenant_insert BEFORE INSERT ON idem_outbox
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

-- The fence table is changed only by FenceTenant and UnfenceTenant; it is
-- never truncated (that would lift every fence at once unnoticed):
-- TRUNCATE fires no trigger, and InnoDB refuses it on a table another
-- table's foreign key references (003's idem_truncate_guard explains).
CREATE TABLE idem_tenant_fences_truncate_guard (
    tenant_hash VARBINARY(32) NULL,
    CONSTRAINT idem_tenant_fences_truncate_guard_fences FOREIGN KEY (tenant_hash) REFERENCES idem_tenant_fences (tenant_hash),
    CONSTRAINT idem_tenant_fences_truncate_guard_empty CHECK (tenant_hash IS NULL)
) ENGINE=InnoDB;
