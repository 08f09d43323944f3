-- The record's invariants as ONE check constraint (a lever of the write
-- path; docs/benchmarks.md, "The levers, by backend CPU"). PostgreSQL
-- prepares every CHECK expression of a table anew for each statement that
-- writes a row — it reads the stored expression back and plans it — so
-- the eleven small CHECKs of migrations 001, 004 and 010 cost a one-row
-- insert or update about 60 µs of backend CPU, a fifth of what the
-- one-transaction record costs over the plain handler's transaction. One
-- CHECK that calls one plpgsql function costs one small expression per
-- statement; plpgsql keeps the function's own expressions prepared for
-- the session.
--
-- Nothing changes in what is refused: idem_operations_valid is the
-- conjunction of exactly the eleven conditions below, each with a CHECK's
-- own meaning (a NULL result passes; coalesce(…, true)), and
-- TestOneCheckEquivalent compares the constraint sets before and after
-- this migration on a quarter of a million candidate rows. A violation is
-- still SQLSTATE 23514 (check_violation), now naming
-- idem_operations_valid. The function is IMMUTABLE: it reads only its
-- arguments.
--
-- Adding the constraint checks the existing rows once (one scan of the
-- table, under the migration's lock).
CREATE FUNCTION idem_operations_valid(
    scope bytea, owner bytea, fingerprint bytea, state text, owner_gen bigint,
    retired_at timestamptz, tombstone_until timestamptz, tombstone_ttl bigint,
    resp_status integer, resp_media_type text, resp_location text, resp_etag text,
    resp_body bytea, resp_digest bytea, resp_key text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    terminal boolean := state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED');
BEGIN
    RETURN
        -- 001: the identity columns' widths, the states, the generation.
        coalesce(length(scope) = 32, true)
        AND coalesce(length(owner) = 32, true)
        AND coalesce(length(fingerprint) = 32, true)
        AND coalesce(state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED'), true)
        AND coalesce(owner_gen >= 1, true)
        -- 004 idem_operations_response: a terminal record that is not a
        -- tombstone carries a complete response snapshot; no other does.
        AND coalesce((terminal AND retired_at IS NULL) =
            (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
             AND resp_etag IS NOT NULL AND resp_body IS NOT NULL
             AND resp_digest IS NOT NULL AND length(resp_digest) = 32), true)
        -- 001 idem_operations_response_absent: in flight, no response.
        AND coalesce(terminal OR (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL), true)
        -- 004 idem_operations_tombstone_ttl.
        AND coalesce(tombstone_ttl > 0, true)
        -- 004 idem_operations_tombstone: a tombstone is a terminal record
        -- without any part of its response.
        AND coalesce(retired_at IS NULL OR (
            terminal AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
            AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL), true)
        -- 004 idem_operations_tombstone_until: only a tombstone has a
        -- deletion time, and only if its claim gave a TTL.
        AND coalesce(tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL), true)
        -- 010 idem_operations_resp_key: a key names a sealed body.
        AND coalesce(resp_key IS NULL OR resp_body IS NOT NULL, true);
END
$$;

ALTER TABLE idem_operations ADD CONSTRAINT idem_operations_valid CHECK (idem_operations_valid(
    scope, owner, fingerprint, state, owner_gen, retired_at, tombstone_until, tombstone_ttl,
    resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key));

ALTER TABLE idem_operations
    DROP CONSTRAINT IF EXISTS idem_operations_scope_check,
    DROP CONSTRAINT IF EXISTS idem_operations_owner_check,
    DROP CONSTRAINT IF EXISTS idem_operations_fingerprint_check,
    DROP CONSTRAINT IF EXISTS idem_operations_state_check,
    DROP CONSTRAINT IF EXISTS idem_operations_owner_gen_check,
    DROP CONSTRAINT IF EXISTS idem_operations_response,
    DROP CONSTRAINT IF EXISTS idem_operations_response_absent,
    DROP CONSTRAINT IF EXISTS idem_operations_tombstone_ttl,
    DROP CONSTRAINT IF EXISTS idem_operations_tombstone,
    DROP CONSTRAINT IF EXISTS idem_operations_tombstone_until,
    DROP CONSTRAINT IF EXISTS idem_operations_resp_key;
