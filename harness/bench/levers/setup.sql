-- Tables of the lever explorations (levers.sh, backendcpu), on a database
-- that "idem migrate" prepared: the plain handler's payment and outbox
-- tables, the floor's one-column table, and copies of idem_operations
-- with parts of its hot-path cost taken away or put back.
CREATE TABLE pay (id text PRIMARY KEY, amount numeric NOT NULL, currency text NOT NULL, payee text NOT NULL,
                  memo text, created_at timestamptz NOT NULL DEFAULT statement_timestamp());
CREATE TABLE ob (seq bigserial PRIMARY KEY, message_id text NOT NULL UNIQUE, topic text NOT NULL,
                 payload bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
                 published_at timestamptz);
CREATE INDEX ob_pending ON ob (seq) WHERE published_at IS NULL;
CREATE TABLE floor (scope bytea PRIMARY KEY);
-- The record as it was before migration 013: every index, and the eleven
-- CHECK constraints of migrations 001, 004 and 010 in place of the one
-- that calls idem_operations_valid.
CREATE TABLE rec_elevenchecks (LIKE idem_operations INCLUDING DEFAULTS INCLUDING INDEXES);
ALTER TABLE rec_elevenchecks
    ADD CHECK (length(scope) = 32), ADD CHECK (length(owner) = 32), ADD CHECK (length(fingerprint) = 32),
    ADD CHECK (state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED')),
    ADD CHECK (owner_gen >= 1),
    ADD CHECK ((state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND retired_at IS NULL) =
        (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
         AND resp_etag IS NOT NULL AND resp_body IS NOT NULL AND resp_digest IS NOT NULL AND length(resp_digest) = 32)),
    ADD CHECK (state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') OR
        (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL)),
    ADD CHECK (tombstone_ttl > 0),
    ADD CHECK (retired_at IS NULL OR (state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
        AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
        AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL)),
    ADD CHECK (tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL)),
    ADD CHECK (resp_key IS NULL OR resp_body IS NOT NULL);
-- That record without the operation ID's unique index.
CREATE TABLE rec_noopid (LIKE rec_elevenchecks INCLUDING ALL);
DO $$
DECLARE i text;
BEGIN
    FOR i IN SELECT conname FROM pg_constraint WHERE conrelid = 'rec_noopid'::regclass AND contype = 'u' LOOP
        EXECUTE format('ALTER TABLE rec_noopid DROP CONSTRAINT %I', i);
    END LOOP;
    FOR i IN SELECT indexname FROM pg_indexes WHERE tablename = 'rec_noopid' AND indexdef LIKE '%(operation_id)%' LOOP
        EXECUTE format('DROP INDEX %I', i);
    END LOOP;
END
$$;
-- With a hash index (not unique) on the operation ID instead.
CREATE TABLE rec_hashopid (LIKE rec_noopid INCLUDING ALL);
CREATE INDEX rec_hashopid_operation_id ON rec_hashopid USING hash (operation_id);
-- Without the retire index (Prune's access path).
CREATE TABLE rec_noretire (LIKE rec_elevenchecks INCLUDING ALL);
DO $$
DECLARE i text;
BEGIN
    FOR i IN SELECT indexname FROM pg_indexes WHERE tablename = 'rec_noretire' AND indexdef LIKE '%(expires_at)%' LOOP
        EXECUTE format('DROP INDEX %I', i);
    END LOOP;
END
$$;
-- With every index and no CHECK at all.
CREATE TABLE rec_nocheck (LIKE idem_operations INCLUDING DEFAULTS INCLUDING INDEXES);
-- With its primary key only: no secondary index, no CHECK.
CREATE TABLE rec_pkonly (LIKE idem_operations INCLUDING DEFAULTS);
ALTER TABLE rec_pkonly ADD PRIMARY KEY (scope);
