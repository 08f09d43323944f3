-- Recovery attempts (attempts.go). Portable SQL: every statement runs
-- unchanged on SQLite, PostgreSQL and MySQL/MariaDB through Store.InTx
-- ($N placeholders; idemmysql rewrites them). The table is the drivers'
-- (idempg migration 024, idemsqlite 019, idemmysql 010).

-- name: attempt_get
-- Always one row: (0, 0, '', 0, 0) for an operation without attempts.
SELECT COUNT(*), COALESCE(MAX(attempts), 0), COALESCE(MAX(last_error), ''), COALESCE(MAX(attempted_ms), 0), COALESCE(MAX(next_ms), 0)
FROM idem_recovery_attempts WHERE operation_id = $1;

-- name: attempt_insert
-- The first failed attempt. Two at once: one fails on the primary key
-- and RecordRecoveryAttempt reads again.
INSERT INTO idem_recovery_attempts (operation_id, attempts, last_error, attempted_ms, next_ms) VALUES ($1, 1, $2, $3, $4);

-- name: attempt_next
-- The compare-and-set: only over the attempts that were read.
UPDATE idem_recovery_attempts SET attempts = attempts + 1, last_error = $3, attempted_ms = $4, next_ms = $5
WHERE operation_id = $1 AND attempts = $2;

-- name: attempt_forget
DELETE FROM idem_recovery_attempts WHERE operation_id = $1;
