-- Test-only changes that no idem code path makes: the gate's verification
-- must notice each of them. The registry's guard triggers refuse changes
-- to a terminal record, so the tests disable them first (PostgreSQL:
-- session_replication_role; SQLite: the triggers are dropped from the
-- throwaway database).

-- name: pg_no_triggers
SET LOCAL session_replication_role = replica

-- name: pg_drop_checks
-- The storage rules refuse a 5xx response at rest (migration 015): the
-- check goes too, from the throwaway database.
ALTER TABLE idem_operations DROP CONSTRAINT IF EXISTS idem_operations_valid

-- name: sqlite_ignore_checks
-- The same for SQLite (migration 011's CHECK constraints), for this
-- connection until sqlite_heed_checks.
PRAGMA ignore_check_constraints = ON

-- name: sqlite_heed_checks
PRAGMA ignore_check_constraints = OFF

-- name: sqlite_drop_transition
DROP TRIGGER IF EXISTS idem_operations_transition

-- name: sqlite_drop_retire
DROP TRIGGER IF EXISTS idem_operations_retire_terminal_only

-- name: sqlite_drop_terminal
DROP TRIGGER IF EXISTS idem_operations_terminal

-- name: sqlite_drop_tombstone
DROP TRIGGER IF EXISTS idem_operations_tombstone

-- name: sqlite_drop_identity
DROP TRIGGER IF EXISTS idem_operations_identity

-- name: sqlite_drop_settled_body
DROP TRIGGER IF EXISTS idem_operations_settled_body

-- name: corrupt_body
UPDATE idem_operations SET resp_body = $1 WHERE operation_id = $2

-- name: second_payment
INSERT INTO payments (id, operation_id, tenant, principal, amount, currency, payee, memo, created_at)
SELECT id || '_dup', operation_id || '_dup', tenant, principal, amount, currency, payee, memo, created_at
FROM payments WHERE operation_id = $1

-- name: delete_payment
DELETE FROM payments WHERE operation_id = $1

-- name: store_502
UPDATE idem_operations SET resp_status = 502 WHERE operation_id = $1
