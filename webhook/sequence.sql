-- Webhook sequences (sequence.go). Portable SQL: every statement runs
-- unchanged on SQLite, PostgreSQL and MySQL/MariaDB through registry.Tx
-- ($N placeholders; idemmysql rewrites them). The table is the drivers'
-- (idempg migration 023, idemsqlite 018, idemmysql 009).

-- name: sequence_get
-- Always one row: (0, 0) for a stream never seen.
SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM idem_webhook_sequences WHERE stream = $1;

-- name: sequence_insert
-- A stream's first event. Two first events of one stream at once: one
-- insert waits for the other's transaction, then fails on the primary
-- key; that delivery fails and its sender retries it.
INSERT INTO idem_webhook_sequences (stream, seq, updated_ms) VALUES ($1, $2, $3);

-- name: sequence_advance
-- The compare-and-set: moves the stream forward, never back.
UPDATE idem_webhook_sequences SET seq = $2, updated_ms = $3 WHERE stream = $1 AND seq < $2;
