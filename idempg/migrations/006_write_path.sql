-- A cheaper write path (docs/benchmarks.md has the measurements). Nothing
-- here relaxes a rule: the database refuses exactly what it refused before.
-- Writers built before this migration keep working on it (nothing they
-- use changed), so a rollback needs no down migration.
--
-- 1. idem_operations_expires (001) goes. Since 004, Prune finds expired
--    records through the partial index idem_operations_retire, and no
--    statement reads expires_at through this one; it only cost an index
--    entry on every reservation and on every outcome (the outcome update
--    changes state, which partial index predicates use, so it is never a
--    HOT update and writes every index again).
DROP INDEX IF EXISTS idem_operations_expires;

-- 2. The transition trigger (004) runs its plpgsql function only when a
--    change is not plainly legal. The WHEN clause below accepts, without
--    calling the function, exactly the changes the function accepts for a
--    record that is in flight or UNKNOWN and not retired: a transition of
--    idem.CanTransition (state.go), not retiring the record, identity
--    columns and tombstone_ttl unchanged, owner_gen not lowered. Every
--    other change — of a terminal record, a tombstone, an illegal
--    transition — still runs the function, which refuses it as before.
--    Every column the clause compares is NOT NULL or compared with IS
--    [NOT] DISTINCT/IS NULL, and coalesce makes a NULL run the function
--    anyway.
DROP TRIGGER idem_operations_guard ON idem_operations;
CREATE TRIGGER idem_operations_guard BEFORE UPDATE ON idem_operations
    FOR EACH ROW
    WHEN (NOT coalesce(
        OLD.retired_at IS NULL AND NEW.retired_at IS NULL AND NEW.tombstone_until IS NULL
        AND ((OLD.state = 'RESERVED' AND NEW.state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'REJECTED'))
          OR (OLD.state = 'EXECUTING' AND NEW.state IN ('EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN'))
          OR (OLD.state = 'UNKNOWN' AND NEW.state IN ('SUCCEEDED', 'FAILED_FINAL')))
        AND NEW.scope = OLD.scope AND NEW.operation_id = OLD.operation_id
        AND NEW.fingerprint = OLD.fingerprint AND NEW.owner = OLD.owner
        AND NEW.operation = OLD.operation AND NEW.created_at = OLD.created_at
        AND NEW.tombstone_ttl IS NOT DISTINCT FROM OLD.tombstone_ttl
        AND NEW.owner_gen >= OLD.owner_gen, false))
    EXECUTE FUNCTION idem_operations_guard();

-- 3. idem_fenced raises SQLSTATE IDM01 (the driver's ErrFenced). The
--    Finish statement (queries.sql) calls it when its compare-and-set
--    matched no row, so that a fenced completion aborts its transaction:
--    Complete can then send Finish and COMMIT in one round trip, and the
--    COMMIT of a fenced transaction becomes a rollback.
CREATE FUNCTION idem_fenced(operation_id text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'idem: operation % is fenced: its owner generation, state or writer epoch moved on', operation_id
        USING ERRCODE = 'IDM01';
END
$$;
