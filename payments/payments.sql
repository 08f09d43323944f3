-- The reference service's business table. Portable SQL: every statement
-- runs unchanged on SQLite and PostgreSQL, with $1… placeholders.
-- Amounts are decimal strings at scale 2 ("12.50"); times are RFC 3339 UTC.
-- id is "pay_" + the operation ID's suffix, so ids sort by creation time.

-- name: create_payments
CREATE TABLE IF NOT EXISTS payments (
    id           TEXT PRIMARY KEY,
    operation_id TEXT NOT NULL UNIQUE,
    tenant       TEXT NOT NULL,
    principal    TEXT NOT NULL,
    amount       TEXT NOT NULL,
    currency     TEXT NOT NULL,
    payee        TEXT NOT NULL,
    memo         TEXT,
    created_at   TEXT NOT NULL
)

-- name: create_payments_owner_index
CREATE INDEX IF NOT EXISTS payments_owner ON payments (tenant, principal, id)

-- name: insert_payment
INSERT INTO payments (id, operation_id, tenant, principal, amount, currency, payee, memo, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)

-- name: get_payment
SELECT id, amount, currency, payee, memo, created_at
FROM payments
WHERE id = $1 AND tenant = $2 AND principal = $3

-- name: list_payments
SELECT id, amount, currency, payee, memo, created_at
FROM payments
WHERE tenant = $1 AND principal = $2
ORDER BY id DESC

-- name: ping
SELECT 1
