-- Tenants (issue 24, registry/tenant.go): which tenant each record is
-- of, and the fence that stops every write to a moving tenant's records.
-- The same rules as idempg's migration 020.
--
-- 1. tenant_hash is registry.TenantHash of the claim's tenant — a
--    SHA-256, never the tenant itself, so a tenant of any bytes is 32
--    bytes here. NULL for records made before this migration
--    ("unattributed"). It never changes. idem_operations_tenant serves
--    the tenant queries (tenant.sql). (ADD COLUMN with a CHECK is allowed:
--    the existing rows are NULL, which passes.)
ALTER TABLE idem_operations ADD COLUMN tenant_hash BLOB NULL
    CONSTRAINT idem_operations_tenant_hash CHECK (tenant_hash IS NULL OR length(tenant_hash) = 32);
CREATE INDEX idem_operations_tenant ON idem_operations (tenant_hash, state);

-- 2. The fence (registry.TenantMover.FenceTenant): one row per fenced
--    tenant, naming where it moved. While the row exists the database
--    refuses, with RAISE(ABORT, 'idem: tenant moved …') (the driver's
--    registry.ErrTenantMoved), every write that could change an outcome
--    of the tenant:
--    * INSERT of a record of the tenant (Reserve, the claims);
--    * UPDATE of its records in flight or UNKNOWN (Complete, TakeOver,
--      ExtendLease, MarkUnknown, Reconcile), except their retirement,
--      and their DELETE (Release);
--    * INSERT and UPDATE of the rows hanging off its operations: effects,
--      lookups, reconciliations, pending settlements, and INSERT of
--      outbox messages.
--    A settled record's only changes (retirement, a re-seal) and the
--    deletions of retention go on; reads are never refused.
CREATE TABLE idem_tenant_fences (
    tenant_hash BLOB    PRIMARY KEY CHECK (length(tenant_hash) = 32),
    moved_to    TEXT    NOT NULL,
    fenced_at   INTEGER NOT NULL
) STRICT;

CREATE TRIGGER idem_operations_tenant_immutable BEFORE UPDATE OF tenant_hash ON idem_operations
    WHEN NEW.tenant_hash IS NOT OLD.tenant_hash
BEGIN
    SELECT RAISE(ABORT, 'idem: a record''s tenant never changes');
END;

CREATE TRIGGER idem_operations_tenant_fence_insert BEFORE INSERT ON idem_operations
    WHEN NEW.tenant_hash IS NOT NULL
     AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = NEW.tenant_hash)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the record''s tenant is fenced');
END;

CREATE TRIGGER idem_operations_tenant_fence_update BEFORE UPDATE ON idem_operations
    WHEN OLD.state IN ('RESERVED', 'EXECUTING', 'UNKNOWN') AND OLD.retired_at IS NULL AND NEW.retired_at IS NULL
     AND OLD.tenant_hash IS NOT NULL
     AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = OLD.tenant_hash)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the record''s tenant is fenced');
END;

CREATE TRIGGER idem_operations_tenant_fence_delete BEFORE DELETE ON idem_operations
    WHEN OLD.state IN ('RESERVED', 'EXECUTING', 'UNKNOWN') AND OLD.retired_at IS NULL
     AND OLD.tenant_hash IS NOT NULL
     AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = OLD.tenant_hash)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the record''s tenant is fenced');
END;

CREATE TRIGGER idem_effects_tenant_fence_insert BEFORE INSERT ON idem_effects
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
CREATE TRIGGER idem_effects_tenant_fence_update BEFORE UPDATE ON idem_effects
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
CREATE TRIGGER idem_effect_lookups_tenant_fence BEFORE INSERT ON idem_effect_lookups
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
CREATE TRIGGER idem_reconciliations_tenant_fence BEFORE INSERT ON idem_reconciliations
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
CREATE TRIGGER idem_pending_settlements_tenant_fence_insert BEFORE INSERT ON idem_pending_settlements
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
CREATE TRIGGER idem_pending_settlements_tenant_fence_update BEFORE UPDATE ON idem_pending_settlements
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
CREATE TRIGGER idem_outbox_tenant_fence BEFORE INSERT ON idem_outbox
    WHEN EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 WHERE o.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'idem: tenant moved: the operation''s tenant is fenced');
END;
