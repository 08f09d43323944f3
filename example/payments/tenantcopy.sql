-- A tenant's business rows, read on its old shard and written on its new
-- one while idem moves the tenant (CopyTenant; docs/shards-move.md).
-- Portable SQL: SQLite and PostgreSQL alike. The old shard refuses the
-- tenant's writes (the fence) before these run, so its rows hold still.

-- name: tenant_payments
SELECT id, operation_id, tenant, principal, amount, currency, payee, memo, created_at, refunded_minor
FROM payments
WHERE tenant = $1
ORDER BY id

-- name: tenant_refunds
SELECT r.id, r.operation_id, r.payment_id, r.payment_operation_id, r.amount, r.reason, r.created_at
FROM refunds r
JOIN payments p ON p.id = r.payment_id
WHERE p.tenant = $1
ORDER BY r.id

-- name: copy_payment
-- A row already there (a re-run of the copy) is left as it is; CopyTenant
-- then reads the rows back and refuses any that differ.
INSERT INTO payments (id, operation_id, tenant, principal, amount, currency, payee, memo, created_at, refunded_minor)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (id) DO NOTHING

-- name: copy_refund
INSERT INTO refunds (id, operation_id, payment_id, payment_operation_id, amount, reason, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO NOTHING
