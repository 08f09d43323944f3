-- The effect floor ("idem bench --effects", effects_handler.go): the
-- least any correct design writes for a call to a downstream outside the
-- database. One durable row holding the request's scope and the
-- downstream key before the call — else a crash after sending forgets the
-- key, and a retry would pay twice — and, after the provider's answer,
-- that answer in the same row, durable before the client is told: two
-- commits of one short row, nothing else. The table is the benchmark's
-- own, created in the run's fresh schema, database or file.

-- name: create_effect_floor_postgres
CREATE TABLE idem_bench_effect_floor (
    scope          bytea PRIMARY KEY,
    downstream_key text NOT NULL,
    status         smallint,
    answer         bytea
)

-- name: create_effect_floor_sqlite
CREATE TABLE idem_bench_effect_floor (
    scope          BLOB PRIMARY KEY,
    downstream_key TEXT NOT NULL,
    status         INTEGER,
    answer         BLOB
) WITHOUT ROWID

-- name: create_effect_floor_mysql
CREATE TABLE idem_bench_effect_floor (
    scope          BINARY(32) PRIMARY KEY,
    downstream_key VARCHAR(64) NOT NULL,
    status         SMALLINT,
    answer         BLOB
) ENGINE=InnoDB

-- name: insert_effect_floor
INSERT INTO idem_bench_effect_floor (scope, downstream_key) VALUES ($1, $2)

-- name: settle_effect_floor
UPDATE idem_bench_effect_floor SET status = $2, answer = $3 WHERE scope = $1 AND status IS NULL

-- name: count_effect_floor
SELECT count(*) FROM idem_bench_effect_floor WHERE status IS NOT NULL

-- name: next_xid
-- The next transaction ID PostgreSQL will assign, without assigning one:
-- the difference around a cell is how many transactions wrote (each
-- commit of a write, synchronous or not, takes one).
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint
