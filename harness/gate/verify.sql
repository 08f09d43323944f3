-- What the gate reads back after a run. Portable SQL: the same statements
-- run on SQLite, PostgreSQL and MySQL/MariaDB (idemmysql rewrites $N). The payments table is the reference
-- service's (payments/payments.sql), the outbox the registry's.

-- name: outbox_last_seq
SELECT COALESCE(MAX(seq), 0) FROM idem_outbox

-- name: payments_of_run
SELECT memo, operation_id FROM payments WHERE memo LIKE $1

-- name: outbox_ops_since
-- The operations with messages of topic $1 after seq $2; the payloads are
-- read through the Store, which opens them if they are sealed.
SELECT DISTINCT operation_id FROM idem_outbox WHERE topic = $1 AND seq > $2 ORDER BY operation_id

-- name: records_5xx
SELECT scope, operation_id, resp_status FROM idem_operations WHERE operation = $1 AND resp_status >= 500
