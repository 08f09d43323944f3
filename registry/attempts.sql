-- Recovery attempts (attempts.go). Portable SQL: every statement runs
-- unchanged on SQLite, PostgreSQL and MySQL/MariaDB through Store.InTx
-- ($N placeholders; idemmysql rewrites them). The table is the drivers'
-- (idempg migration 024, idemsqlite 019, idemmysql 010).

-- name: attempt_get
-- Always one row: (0, 0, '', 0, 0) for an operation without attempts.
SELECT COUNT(*), COALESCE(MAX(attempts), 0), COALESCE(MAX(last_error), ''), COALESCE(MAX(attempted_ms), 0), COALESCE(MAX(next_ms), 0)
FROM idem_recovery_attempts WHERE operation_id = $1;

-- name: attempt_insert
-- The first failed attempt, when attempt_next found no row. Two at once:
-- one fails on the primary key and RecordRecoveryAttempt tries again,
-- then as the next attempt.
INSERT INTO idem_recovery_attempts (operation_id, attempts, last_error, attempted_ms, next_ms) VALUES ($1, 1, $2, $3, $4);

-- name: attempt_next
-- One atomic step forward: the count is raised by the database under the
-- row's lock, so concurrent workers never lose an attempt nor retry.
UPDATE idem_recovery_attempts SET attempts = attempts + 1, last_error = $2, attempted_ms = $3, next_ms = $4
WHERE operation_id = $1;

-- name: attempt_forget
DELETE FROM idem_recovery_attempts WHERE operation_id = $1;
