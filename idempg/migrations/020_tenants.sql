-- Tenants (issue 24, registry/tenant.go): which tenant each record is
-- of, and the fence that stops every write to a moving tenant's records.
--
-- 1. tenant_hash is registry.TenantHash of the claim's tenant — a
--    SHA-256, never the tenant itself, so a tenant of any bytes (NUL,
--    invalid UTF-8, megabytes) is 32 bytes here. NULL for records made
--    before this migration ("unattributed"). It never changes (the fence
--    guard below refuses it). idem_operations_tenant serves the tenant
--    queries (tenant.sql): a tenant's records, by state. (Built in the
--    migration's transaction, as 002 explains; on a large table create it
--    CONCURRENTLY by hand under this name first.)
ALTER TABLE idem_operations ADD COLUMN tenant_hash bytea NULL
    CONSTRAINT idem_operations_tenant_hash CHECK (tenant_hash IS NULL OR length(tenant_hash) = 32);
CREATE INDEX IF NOT EXISTS idem_operations_tenant ON idem_operations (tenant_hash, state);

-- 2. The fence (registry.TenantMover.FenceTenant): one row per fenced
--    tenant, naming where it moved. While the row exists the database
--    refuses, with SQLSTATE IDM03 (the driver's registry.ErrTenantMoved),
--    every write that could change an outcome of the tenant:
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
    tenant_hash bytea       PRIMARY KEY CHECK (length(tenant_hash) = 32),
    moved_to    text        NOT NULL,
    fenced_at   timestamptz NOT NULL
);

CREATE FUNCTION idem_tenant_moved(p_tenant bytea, p_operation_id text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'idem: operation % belongs to a fenced tenant: it moved to another registry', p_operation_id
        USING ERRCODE = 'IDM03';
END
$$;

CREATE FUNCTION idem_operations_tenant_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state IN ('RESERVED', 'EXECUTING', 'UNKNOWN') AND OLD.retired_at IS NULL
           AND OLD.tenant_hash IS NOT NULL
           AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = OLD.tenant_hash) THEN
            PERFORM idem_tenant_moved(OLD.tenant_hash, OLD.operation_id);
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.tenant_hash IS DISTINCT FROM OLD.tenant_hash THEN
            RAISE EXCEPTION 'idem: a record''s tenant never changes'
                USING ERRCODE = 'check_violation';
        END IF;
        IF OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') OR OLD.retired_at IS NOT NULL
           OR NEW.retired_at IS NOT NULL THEN
            RETURN NEW; -- retention and re-seals: no outcome changes
        END IF;
    END IF;
    IF NEW.tenant_hash IS NOT NULL
       AND EXISTS (SELECT 1 FROM idem_tenant_fences f WHERE f.tenant_hash = NEW.tenant_hash) THEN
        PERFORM idem_tenant_moved(NEW.tenant_hash, NEW.operation_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER idem_operations_tenant_fence BEFORE INSERT OR UPDATE OR DELETE ON idem_operations
    FOR EACH ROW EXECUTE FUNCTION idem_operations_tenant_fence();

-- The rows of an operation: fenced with their record's tenant.
CREATE FUNCTION idem_operation_rows_tenant_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f
               JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.operation_id = NEW.operation_id) THEN
        PERFORM idem_tenant_moved(NULL, NEW.operation_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER idem_effects_tenant_fence BEFORE INSERT OR UPDATE ON idem_effects
    FOR EACH ROW EXECUTE FUNCTION idem_operation_rows_tenant_fence();
CREATE TRIGGER idem_effect_lookups_tenant_fence BEFORE INSERT ON idem_effect_lookups
    FOR EACH ROW EXECUTE FUNCTION idem_operation_rows_tenant_fence();
CREATE TRIGGER idem_reconciliations_tenant_fence BEFORE INSERT ON idem_reconciliations
    FOR EACH ROW EXECUTE FUNCTION idem_operation_rows_tenant_fence();
CREATE TRIGGER idem_pending_settlements_tenant_fence BEFORE INSERT OR UPDATE ON idem_pending_settlements
    FOR EACH ROW EXECUTE FUNCTION idem_operation_rows_tenant_fence();
CREATE TRIGGER idem_outbox_tenant_fence BEFORE INSERT ON idem_outbox
    FOR EACH ROW EXECUTE FUNCTION idem_operation_rows_tenant_fence();

-- The fence table is changed only by FenceTenant and UnfenceTenant; it is
-- never truncated (that would lift every fence at once unnoticed).
CREATE TRIGGER idem_tenant_fences_no_truncate BEFORE TRUNCATE ON idem_tenant_fences
    FOR EACH STATEMENT EXECUTE FUNCTION idem_no_truncate();
