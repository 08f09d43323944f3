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
