-- Scope-led operation IDs (docs/contract.md, "Operation IDs", layout v1):
-- an ID carries the first 5 bytes of its record's scope in 10 upper-case
-- hex characters (characters 15 to 24), so a record is found by ID through
-- the primary key — the scopes of that prefix (about one record), then
-- the full ID — and the unique index on operation_id goes: it was a
-- second B-tree written on every insert. The same rules as idempg's
-- migration 026 and idemsqlite's 021.
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
-- records are deleted; its primary key keeps those IDs unique as the
-- dropped index did. MariaDB has no partial index (one over legacy rows
-- only would have done on PostgreSQL and SQLite), so all three drivers
-- keep a table. operation_id is VARBINARY here: compared with a query's
-- parameter (which carries the connection's collation) it compares byte
-- for byte and through the key.
CREATE TABLE idem_legacy_operation_ids (
    operation_id VARBINARY(64) NOT NULL,
    scope        BINARY(32)    NOT NULL,
    PRIMARY KEY (operation_id)
) ENGINE=InnoDB;

INSERT INTO idem_legacy_operation_ids (operation_id, scope)
SELECT operation_id, scope FROM idem_operations
WHERE NOT (CHAR_LENGTH(operation_id) = 40 AND LEFT(operation_id, 4) = 'op_1' AND SUBSTRING(operation_id, 15, 10) = HEX(LEFT(scope, 5)));

ALTER TABLE idem_operations DROP INDEX idem_operations_operation_id;

-- A record whose ID does not lead to its scope is noted; deleting it
-- deletes the note (scope and operation_id never change: migration 001's
-- idem_operations_update refuses it).
CREATE TRIGGER idem_operations_legacy_id_insert AFTER INSERT ON idem_operations
FOR EACH ROW
BEGIN
    IF NOT (CHAR_LENGTH(NEW.operation_id) = 40 AND LEFT(NEW.operation_id, 4) = 'op_1'
            AND SUBSTRING(NEW.operation_id, 15, 10) = HEX(LEFT(NEW.scope, 5))) THEN
        INSERT INTO idem_legacy_operation_ids (operation_id, scope) VALUES (NEW.operation_id, NEW.scope);
    END IF;
END;

CREATE TRIGGER idem_operations_legacy_id_delete AFTER DELETE ON idem_operations
FOR EACH ROW
BEGIN
    DELETE FROM idem_legacy_operation_ids WHERE operation_id = OLD.operation_id AND scope = OLD.scope;
END;

-- The triggers of migrations 001, 002, 003 and 006 that read a record by
-- its ID, now through the primary key (or the legacy table).

DROP TRIGGER idem_outbox_delete;

CREATE TRIGGER idem_outbox_delete BEFORE DELETE ON idem_outbox
FOR EACH ROW
BEGIN
    IF OLD.published_at IS NULL
       OR EXISTS (SELECT 1 FROM idem_operations o
                  WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'FF')
                    AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
          OR EXISTS (SELECT 1 FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
                     WHERE l.operation_id = OLD.operation_id AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: an outbox message is deleted only once published, with its operation''s expiring tombstone';
    END IF;
END;

DROP TRIGGER idem_effects_delete;

CREATE TRIGGER idem_effects_delete BEFORE DELETE ON idem_effects
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations o
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'FF')
                AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
      OR EXISTS (SELECT 1 FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
                 WHERE l.operation_id = OLD.operation_id AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: an effect attempt is deleted only with its operation''s expiring tombstone';
    END IF;
END;

DROP TRIGGER idem_reconciliations_delete;

CREATE TRIGGER idem_reconciliations_delete BEFORE DELETE ON idem_reconciliations
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations o
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'FF')
                AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
      OR EXISTS (SELECT 1 FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
                 WHERE l.operation_id = OLD.operation_id AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a reconciliation is deleted only with its operation''s expiring tombstone';
    END IF;
END;

DROP TRIGGER idem_effect_lookups_delete;

CREATE TRIGGER idem_effect_lookups_delete BEFORE DELETE ON idem_effect_lookups
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations o
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'FF')
                AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
      OR EXISTS (SELECT 1 FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
                 WHERE l.operation_id = OLD.operation_id AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: idem_effect_lookups keeps every row of a live operation';
    END IF;
END;

DROP TRIGGER idem_pending_settlements_delete;

CREATE TRIGGER idem_pending_settlements_delete BEFORE DELETE ON idem_pending_settlements
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_operations o
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(OLD.operation_id, 15, 10)), 32, X'FF')
                AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
      OR EXISTS (SELECT 1 FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
                 WHERE l.operation_id = OLD.operation_id AND o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: idem_pending_settlements keeps every row of a live operation';
    END IF;
END;

DROP TRIGGER idem_effects_tenant_insert;

CREATE TRIGGER idem_effects_tenant_insert BEFORE INSERT ON idem_effects
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'FF') AND o.operation_id = NEW.operation_id)
      OR EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                 WHERE l.operation_id = NEW.operation_id AND o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

DROP TRIGGER idem_effects_tenant_update;

CREATE TRIGGER idem_effects_tenant_update BEFORE UPDATE ON idem_effects
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'FF') AND o.operation_id = NEW.operation_id)
      OR EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                 WHERE l.operation_id = NEW.operation_id AND o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

DROP TRIGGER idem_effect_lookups_tenant_insert;

CREATE TRIGGER idem_effect_lookups_tenant_insert BEFORE INSERT ON idem_effect_lookups
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'FF') AND o.operation_id = NEW.operation_id)
      OR EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                 WHERE l.operation_id = NEW.operation_id AND o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

DROP TRIGGER idem_reconciliations_tenant_insert;

CREATE TRIGGER idem_reconciliations_tenant_insert BEFORE INSERT ON idem_reconciliations
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'FF') AND o.operation_id = NEW.operation_id)
      OR EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                 WHERE l.operation_id = NEW.operation_id AND o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

DROP TRIGGER idem_pending_settlements_tenant_insert;

CREATE TRIGGER idem_pending_settlements_tenant_insert BEFORE INSERT ON idem_pending_settlements
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'FF') AND o.operation_id = NEW.operation_id)
      OR EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                 WHERE l.operation_id = NEW.operation_id AND o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

DROP TRIGGER idem_pending_settlements_tenant_update;

CREATE TRIGGER idem_pending_settlements_tenant_update BEFORE UPDATE ON idem_pending_settlements
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'FF') AND o.operation_id = NEW.operation_id)
      OR EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                 WHERE l.operation_id = NEW.operation_id AND o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;

DROP TRIGGER idem_outbox_tenant_insert;

CREATE TRIGGER idem_outbox_tenant_insert BEFORE INSERT ON idem_outbox
FOR EACH ROW
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
              WHERE o.scope BETWEEN RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'00') AND RPAD(UNHEX(SUBSTRING(NEW.operation_id, 15, 10)), 32, X'FF') AND o.operation_id = NEW.operation_id)
      OR EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                 JOIN idem_legacy_operation_ids l ON l.scope = o.scope
                 WHERE l.operation_id = NEW.operation_id AND o.operation_id = NEW.operation_id) THEN
        SIGNAL SQLSTATE 'IDM03' SET MESSAGE_TEXT = 'idem: the operation belongs to a fenced tenant: it moved to another registry';
    END IF;
END;
