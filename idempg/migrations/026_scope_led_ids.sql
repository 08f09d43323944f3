-- Scope-led operation IDs (docs/contract.md, "Operation IDs", layout v1):
-- an ID carries the first 5 bytes of its record's scope in 10 upper-case
-- hex characters (characters 15 to 24), so a record is found by ID through
-- the primary key — the scopes of that prefix (about one record), then the
-- full ID compared — and the unique index on operation_id goes. It cost
-- 8–22 µs of backend CPU and about 170 B of WAL on every write
-- (docs/benchmarks.md, "Where the one-transaction record's cost goes").
--
-- Uniqueness of operation IDs holds without it, by construction: the scope
-- is the primary key and an ID carries its scope's prefix, so two records
-- could share an ID only if their scopes shared 40 bits and their IDs the
-- same millisecond and the same 80 random bits (crypto/rand).
--
-- IDs that do not lead to their scope — every ID made before this
-- migration (the ULID layout, "op_" and 26 characters) and any a record
-- is inserted with later (an import of an older registry's tenant, a
-- previous binary after a rollback) — are kept in idem_legacy_operation_ids
-- with their scope, written here and by the triggers below, until their
-- records are deleted. Its primary key keeps those IDs unique as the
-- dropped index did. A partial index over legacy rows would do the same
-- on PostgreSQL and SQLite, but MariaDB has none; one table works on all
-- three drivers (idemsqlite's migration 021, idemmysql's 012).
CREATE TABLE idem_legacy_operation_ids (
    operation_id text  PRIMARY KEY,
    scope        bytea NOT NULL CHECK (length(scope) = 32)
);

-- Whether p_id is of layout v1 and carries p_scope's prefix.
CREATE FUNCTION idem_id_leads(p_id text, p_scope bytea) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT length(p_id) = 40 AND substr(p_id, 1, 4) = 'op_1'
           AND substr(p_id, 15, 10) = upper(encode(substr(p_scope, 1, 5), 'hex'))
$$;

-- The least and greatest scope the record of operation ID p_id can have:
-- a legacy ID's scope, else the range its layout-v1 prefix names; NULL
-- (so no row matches) for anything else.
CREATE FUNCTION idem_id_scope_lo(p_id text) RETURNS bytea LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT scope FROM idem_legacy_operation_ids WHERE operation_id = p_id),
                    CASE WHEN length(p_id) = 40 AND substr(p_id, 1, 4) = 'op_1' AND substr(p_id, 15, 10) ~ '^[0-9A-F]{10}$'
                         THEN decode(substr(p_id, 15, 10) || repeat('00', 27), 'hex') END)
$$;
CREATE FUNCTION idem_id_scope_hi(p_id text) RETURNS bytea LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT scope FROM idem_legacy_operation_ids WHERE operation_id = p_id),
                    CASE WHEN length(p_id) = 40 AND substr(p_id, 1, 4) = 'op_1' AND substr(p_id, 15, 10) ~ '^[0-9A-F]{10}$'
                         THEN decode(substr(p_id, 15, 10) || repeat('ff', 27), 'hex') END)
$$;

INSERT INTO idem_legacy_operation_ids (operation_id, scope)
SELECT operation_id, scope FROM idem_operations WHERE NOT idem_id_leads(operation_id, scope);

ALTER TABLE idem_operations DROP CONSTRAINT idem_operations_operation_id_key;

-- A record whose ID does not lead to its scope is noted; deleting it
-- deletes the note. The WHEN is evaluated before the trigger is queued,
-- so a record of layout v1 pays one comparison, no call. (scope and
-- operation_id never change: the guard of migration 015 refuses it.)
CREATE FUNCTION idem_legacy_id_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO idem_legacy_operation_ids (operation_id, scope) VALUES (NEW.operation_id, NEW.scope);
        RETURN NEW;
    END IF;
    DELETE FROM idem_legacy_operation_ids WHERE operation_id = OLD.operation_id AND scope = OLD.scope;
    RETURN OLD;
END
$$;
CREATE TRIGGER idem_operations_legacy_id_insert AFTER INSERT ON idem_operations
    FOR EACH ROW WHEN (NOT idem_id_leads(NEW.operation_id, NEW.scope)) EXECUTE FUNCTION idem_legacy_id_note();
CREATE TRIGGER idem_operations_legacy_id_delete AFTER DELETE ON idem_operations
    FOR EACH ROW WHEN (NOT idem_id_leads(OLD.operation_id, OLD.scope)) EXECUTE FUNCTION idem_legacy_id_note();

-- The functions of migrations 015 and 020 that read a record by its ID,
-- now through the primary key.
CREATE OR REPLACE FUNCTION idem_record_deletable(p_operation_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM idem_operations
                       WHERE scope BETWEEN idem_id_scope_lo(p_operation_id) AND idem_id_scope_hi(p_operation_id)
                         AND operation_id = p_operation_id AND tombstone_until IS NULL)
$$;
CREATE OR REPLACE FUNCTION idem_operation_rows_tenant_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f
               JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
               WHERE o.scope BETWEEN idem_id_scope_lo(NEW.operation_id) AND idem_id_scope_hi(NEW.operation_id)
                 AND o.operation_id = NEW.operation_id) THEN
        PERFORM idem_tenant_moved(NULL, NEW.operation_id);
    END IF;
    RETURN NEW;
END
$$;
