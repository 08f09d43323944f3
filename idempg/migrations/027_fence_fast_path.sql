-- The tenant fence of an operation's rows without the cost it had since
-- migration 026 (docs/benchmarks.md, "The effect path"). Nothing here
-- relaxes a rule: the database refuses exactly what it refused before.
--
-- 1. idem_id_scope_lo and idem_id_scope_hi (026) were SQL functions that
--    PostgreSQL cannot inline (their bodies hold a sub-select), so every
--    statement that called them planned their query afresh: a lookup of a
--    record by ID spent 0.3–0.6 ms in the two calls (EXPLAIN ANALYZE,
--    generic plan, about 2,200 records). As PL/pgSQL functions their one
--    query's plan is cached for the session's life, and the whole lookup
--    takes about 0.03 ms. Same arguments, same results.
CREATE OR REPLACE FUNCTION idem_id_scope_lo(p_id text) RETURNS bytea LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT scope FROM idem_legacy_operation_ids WHERE operation_id = p_id),
                    CASE WHEN length(p_id) = 40 AND substr(p_id, 1, 4) = 'op_1' AND substr(p_id, 15, 10) ~ '^[0-9A-F]{10}$'
                         THEN decode(substr(p_id, 15, 10) || repeat('00', 27), 'hex') END);
END
$$;
CREATE OR REPLACE FUNCTION idem_id_scope_hi(p_id text) RETURNS bytea LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT scope FROM idem_legacy_operation_ids WHERE operation_id = p_id),
                    CASE WHEN length(p_id) = 40 AND substr(p_id, 1, 4) = 'op_1' AND substr(p_id, 15, 10) ~ '^[0-9A-F]{10}$'
                         THEN decode(substr(p_id, 15, 10) || repeat('ff', 27), 'hex') END);
END
$$;

-- 2. The fence of an operation's rows (effects, lookups, reconciliations,
--    pending settlements, outbox messages; migration 020) looked the
--    operation's record up by ID on every write, fence or none: 220 µs
--    of each effect write and each outbox insert, 660 µs of a transfer.
--    It now looks only while some tenant is fenced — the same test the
--    relay's claim makes (queries.sql) — in one expression, so one
--    snapshot decides both halves as it decided the one query before.
CREATE OR REPLACE FUNCTION idem_operation_rows_tenant_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM idem_tenant_fences)
       AND EXISTS (SELECT 1 FROM idem_tenant_fences f
                   JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                   WHERE o.scope BETWEEN idem_id_scope_lo(NEW.operation_id) AND idem_id_scope_hi(NEW.operation_id)
                     AND o.operation_id = NEW.operation_id) THEN
        PERFORM idem_tenant_moved(NULL, NEW.operation_id);
    END IF;
    RETURN NEW;
END
$$;

-- 3. The settled-response trigger (016) called its function on every
--    update of a record, in flight or not, to find that it had nothing to
--    check unless the record was settled and unretired and stays
--    unretired. That test is now the trigger's WHEN, which runs no
--    function: the function still refuses, for exactly those rows, what
--    it refused before (its own IF repeats the test), and no other row
--    could reach its RAISE. Every outcome, lease extension and takeover
--    of an in-flight record skips a PL/pgSQL call.
DROP TRIGGER idem_operations_settled_body ON idem_operations;
CREATE TRIGGER idem_operations_settled_body BEFORE UPDATE ON idem_operations
    FOR EACH ROW
    WHEN (OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL AND NEW.retired_at IS NULL)
    EXECUTE FUNCTION idem_operations_settled_body();

-- 4. The legacy-ID triggers (026) asked idem_id_leads in their WHEN. A
--    trigger's WHEN is prepared afresh for every statement that fires it,
--    and preparing inlines an SQL function by parsing its body: every
--    insert of a record parsed and analysed idem_id_leads's text. The
--    WHEN now holds that body's expression itself — the same test,
--    written out once more here — so a record of layout v1 still pays one
--    comparison and no call, and now no parse either. The conformance
--    case GetByIDScopeLed holds the copy to the original: an imported ID
--    of layout v1 that does not carry its scope's prefix must be noted,
--    or it is not found by ID.
DROP TRIGGER idem_operations_legacy_id_insert ON idem_operations;
CREATE TRIGGER idem_operations_legacy_id_insert AFTER INSERT ON idem_operations
    FOR EACH ROW
    WHEN (NOT (length(NEW.operation_id) = 40 AND substr(NEW.operation_id, 1, 4) = 'op_1'
               AND substr(NEW.operation_id, 15, 10) = upper(encode(substr(NEW.scope, 1, 5), 'hex'))))
    EXECUTE FUNCTION idem_legacy_id_note();
DROP TRIGGER idem_operations_legacy_id_delete ON idem_operations;
CREATE TRIGGER idem_operations_legacy_id_delete AFTER DELETE ON idem_operations
    FOR EACH ROW
    WHEN (NOT (length(OLD.operation_id) = 40 AND substr(OLD.operation_id, 1, 4) = 'op_1'
               AND substr(OLD.operation_id, 15, 10) = upper(encode(substr(OLD.scope, 1, 5), 'hex'))))
    EXECUTE FUNCTION idem_legacy_id_note();

-- 5. The attempts' guard (010) is one IF that raises: its test is now
--    the trigger's WHEN too, so an update the guard accepts — every
--    answer recorded — calls no function. The function keeps its IF.
DROP TRIGGER idem_effects_guard ON idem_effects;
CREATE TRIGGER idem_effects_guard BEFORE UPDATE ON idem_effects
    FOR EACH ROW
    WHEN (NEW.operation_id <> OLD.operation_id OR NEW.name <> OLD.name
          OR NEW.downstream_key <> OLD.downstream_key OR NEW.created_at <> OLD.created_at
          OR NEW.owner_gen < OLD.owner_gen
          OR (OLD.request IS NOT NULL AND NEW.request IS DISTINCT FROM OLD.request
              AND (NEW.request_key IS NULL OR NEW.request_key IS NOT DISTINCT FROM OLD.request_key)))
    EXECUTE FUNCTION idem_effects_guard();
