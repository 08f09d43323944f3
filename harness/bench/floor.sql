-- The floor variant's idempotency row (floor.go): a 32-byte scope as the
-- primary key and nothing else, the smallest row that still makes a
-- duplicate request fail. PostgreSQL has no index-organised tables, so it
-- is a heap row plus its primary-key index entry; on SQLite WITHOUT ROWID
-- makes the primary key the table's only B-tree (a rowid table would add
-- a second one for the key's index); InnoDB tables are clustered on their
-- primary key, so on MySQL/MariaDB too the key is the only B-tree. The
-- table is the benchmark's own: the run creates it in its fresh schema,
-- database or file.

-- name: create_floor_postgres
CREATE TABLE idem_bench_floor (scope bytea PRIMARY KEY)

-- name: create_floor_sqlite
CREATE TABLE idem_bench_floor (scope BLOB PRIMARY KEY) WITHOUT ROWID

-- name: create_floor_mysql
CREATE TABLE idem_bench_floor (scope BINARY(32) PRIMARY KEY) ENGINE=InnoDB

-- name: insert_floor
INSERT INTO idem_bench_floor (scope) VALUES ($1)

-- name: count_floor
SELECT count(*) FROM idem_bench_floor
