-- The outbox row of the plain (non-idempotent) create handler, plain.go.
-- It goes to the same table the registry's outcome commit writes
-- (idem_outbox), with the same columns and a database-time created_at, so
-- the plain and the idempotent path write the same rows. created_at is
-- timestamptz on PostgreSQL and integer microseconds on SQLite and
-- MySQL/MariaDB, hence one statement per database. $1 message ID, $2 request ID, $3 topic, $4 payload.

-- name: insert_outbox_postgres
INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at)
VALUES ($1, $2, $3, $4, statement_timestamp())

-- name: insert_outbox_sqlite
INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at)
VALUES ($1, $2, $3, $4, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER))

-- name: insert_outbox_mysql
INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at)
VALUES ($1, $2, $3, $4, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
