-- Tables of the record-width exploration (levers.sh), on a database that
-- "idem migrate" prepared: the plain handler's payment and outbox tables,
-- the floor's one-column table, and copies of idem_operations with parts
-- of its hot-path cost taken away.
CREATE TABLE pay (id text PRIMARY KEY, amount numeric NOT NULL, currency text NOT NULL, payee text NOT NULL,
                  memo text, created_at timestamptz NOT NULL DEFAULT statement_timestamp());
CREATE TABLE ob (seq bigserial PRIMARY KEY, message_id text NOT NULL UNIQUE, topic text NOT NULL,
                 payload bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
                 published_at timestamptz);
CREATE INDEX ob_pending ON ob (seq) WHERE published_at IS NULL;
CREATE TABLE floor (scope bytea PRIMARY KEY);
-- The record without the operation ID's unique index.
CREATE TABLE rec_noopid (LIKE idem_operations INCLUDING ALL);
ALTER TABLE rec_noopid DROP CONSTRAINT rec_noopid_operation_id_key;
-- The record with its primary key only: no secondary index, no CHECK.
CREATE TABLE rec_pkonly (LIKE idem_operations INCLUDING DEFAULTS);
ALTER TABLE rec_pkonly ADD PRIMARY KEY (scope);
-- The record with every index but no CHECK constraint.
CREATE TABLE rec_nocheck (LIKE idem_operations INCLUDING DEFAULTS INCLUDING INDEXES);
-- The record without the retire index (Prune's access path).
CREATE TABLE rec_noretire (LIKE idem_operations INCLUDING ALL);
DO $$
DECLARE i text;
BEGIN
    FOR i IN SELECT indexname FROM pg_indexes WHERE tablename = 'rec_noretire' AND indexdef LIKE '%(expires_at)%' LOOP
        EXECUTE format('DROP INDEX %I', i);
    END LOOP;
END
$$;
-- The record whose operation ID has a hash index (not unique) instead of
-- the unique B-tree.
CREATE TABLE rec_hashopid (LIKE rec_noopid INCLUDING ALL);
CREATE INDEX rec_hashopid_operation_id ON rec_hashopid USING hash (operation_id);
-- The record with its CHECKs as one CHECK calling one function: the
-- executor prepares each CHECK expression anew for every statement, so
-- eleven small CHECKs cost more than one call of a function whose
-- expressions plpgsql caches per session.
CREATE FUNCTION rec_onecheck_valid(scope bytea, owner bytea, fingerprint bytea, state text, owner_gen bigint,
    retired_at timestamptz, tombstone_until timestamptz, tombstone_ttl bigint, resp_status integer,
    resp_media_type text, resp_location text, resp_etag text, resp_body bytea, resp_digest bytea, resp_key text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE terminal boolean := state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED');
BEGIN
    RETURN coalesce(
        length(scope) = 32 AND length(owner) = 32 AND length(fingerprint) = 32
        AND state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED')
        AND owner_gen >= 1
        AND (terminal AND retired_at IS NULL) = (resp_status IS NOT NULL AND resp_media_type IS NOT NULL
            AND resp_location IS NOT NULL AND resp_etag IS NOT NULL AND resp_body IS NOT NULL
            AND resp_digest IS NOT NULL AND length(resp_digest) = 32)
        AND (terminal OR (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL))
        AND (retired_at IS NULL OR (terminal AND resp_status IS NULL AND resp_media_type IS NULL
            AND resp_location IS NULL AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL))
        AND (tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL))
        AND (tombstone_ttl IS NULL OR tombstone_ttl > 0)
        AND (resp_key IS NULL OR resp_body IS NOT NULL), false);
END
$$;
CREATE TABLE rec_onecheck (LIKE idem_operations INCLUDING DEFAULTS INCLUDING INDEXES);
ALTER TABLE rec_onecheck ADD CONSTRAINT rec_onecheck_valid CHECK (rec_onecheck_valid(scope, owner, fingerprint,
    state, owner_gen, retired_at, tombstone_until, tombstone_ttl, resp_status, resp_media_type, resp_location,
    resp_etag, resp_body, resp_digest, resp_key));
