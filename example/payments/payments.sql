-- The reference service's business tables. Portable SQL: every statement
-- runs unchanged on SQLite, PostgreSQL and MySQL/MariaDB, with $1…
-- placeholders (idemmysql rewrites them to "?"), unless its name ends in
-- _postgres, _sqlite or _mysql.
-- Amounts are decimal strings at scale 2 ("12.50"); times are RFC 3339 UTC.
-- id is "pay_" (payments) or "ref_" (refunds) followed by the operation
-- ID's suffix, so ids sort by creation time.

-- name: create_payments
-- refunded_minor is the sum of the payment's refunds in minor units
-- (cents); add_refunded raises it and never past the amount.
CREATE TABLE IF NOT EXISTS payments (
    id             TEXT PRIMARY KEY,
    operation_id   TEXT NOT NULL UNIQUE,
    tenant         TEXT NOT NULL,
    principal      TEXT NOT NULL,
    amount         TEXT NOT NULL,
    currency       TEXT NOT NULL,
    payee          TEXT NOT NULL,
    memo           TEXT,
    created_at     TEXT NOT NULL,
    refunded_minor BIGINT NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0)
)

-- name: create_payments_owner_index
CREATE INDEX IF NOT EXISTS payments_owner ON payments (tenant, principal, id)

-- name: payments_has_refunded_postgres
-- A payments table created before refunds existed lacks refunded_minor:
-- the add_payments_refunded statement runs only when this counts 0, so a
-- start does not take the ALTER's table lock once the column exists.
SELECT count(*)
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'payments' AND column_name = 'refunded_minor'

-- name: add_payments_refunded_postgres
-- IF NOT EXISTS: instances that start at once may all have counted 0.
ALTER TABLE payments ADD COLUMN IF NOT EXISTS
    refunded_minor BIGINT NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0)

-- name: payments_has_refunded_sqlite
-- As on PostgreSQL; SQLite has no ADD COLUMN IF NOT EXISTS, but the write
-- transaction holds the database's write lock from its start, so the
-- count and the ALTER are one step.
SELECT count(*) FROM pragma_table_info('payments') WHERE name = 'refunded_minor'

-- name: add_payments_refunded_sqlite
ALTER TABLE payments ADD COLUMN
    refunded_minor BIGINT NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0)

-- name: create_payments_mysql
-- MySQL/MariaDB cannot index TEXT without a prefix length, and its
-- character collations compare with trailing spaces ignored and (but
-- for _bin) case folded. The keys are therefore binary strings, compared
-- byte for byte as on the other engines: id and operation_id are
-- VARBINARY(64), the service's own values ("pay_"/"op_" and 26
-- characters: 29 or 30 bytes); tenant and principal, which come from the
-- token file and have no bound, are BLOBs indexed on their first 255
-- bytes (a longer one is stored whole and compared whole; the index only
-- narrows the search). A path id longer than 64 bytes is compared, never
-- stored, so no request can make an insert fail for length. The owner
-- index and refunded_minor are part of the table from the start.
CREATE TABLE IF NOT EXISTS payments (
    id             VARBINARY(64) NOT NULL PRIMARY KEY,
    operation_id   VARBINARY(64) NOT NULL UNIQUE,
    tenant         BLOB NOT NULL,
    principal      BLOB NOT NULL,
    amount         TEXT NOT NULL,
    currency       TEXT NOT NULL,
    payee          TEXT NOT NULL,
    memo           TEXT,
    created_at     TEXT NOT NULL,
    refunded_minor BIGINT NOT NULL DEFAULT 0 CHECK (refunded_minor >= 0),
    KEY payments_owner (tenant(255), principal(255), id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin

-- name: create_refunds_mysql
-- As create_refunds, with create_payments_mysql's binary keys.
CREATE TABLE IF NOT EXISTS refunds (
    id                   VARBINARY(64) NOT NULL PRIMARY KEY,
    operation_id         VARBINARY(64) NOT NULL UNIQUE,
    payment_id           VARBINARY(64) NOT NULL,
    payment_operation_id VARBINARY(64) NOT NULL,
    amount               TEXT NOT NULL,
    reason               TEXT,
    created_at           TEXT NOT NULL,
    KEY refunds_payment (payment_id, id),
    CONSTRAINT refunds_payment_id FOREIGN KEY (payment_id) REFERENCES payments (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin

-- name: create_refunds
-- A refund of a payment (POST /v1/payments/{id}/refunds), linked to the
-- payment and to the operation that created it. The owner is the
-- payment's.
CREATE TABLE IF NOT EXISTS refunds (
    id                   TEXT PRIMARY KEY,
    operation_id         TEXT NOT NULL UNIQUE,
    payment_id           TEXT NOT NULL REFERENCES payments (id),
    payment_operation_id TEXT NOT NULL,
    amount               TEXT NOT NULL,
    reason               TEXT,
    created_at           TEXT NOT NULL
)

-- name: create_refunds_payment_index
CREATE INDEX IF NOT EXISTS refunds_payment ON refunds (payment_id, id)

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

-- name: get_refundable_payment
-- The payment a refund is for, if the caller owns it. A payment's amount
-- never changes, so this read needs no lock: add_refunded alone enforces
-- the cap.
SELECT operation_id, amount
FROM payments
WHERE id = $1 AND tenant = $2 AND principal = $3

-- name: add_refunded
-- Raises the payment's refunded total by $2 minor units unless that would
-- pass $3, its amount in minor units; 0 rows affected means the refund
-- exceeds what is left. The UPDATE's row lock serialises concurrent
-- refunds of one payment: on PostgreSQL (READ COMMITTED) a second UPDATE
-- waits for the first transaction to end and re-evaluates its condition on
-- the row that transaction committed; InnoDB (READ COMMITTED, idemmysql)
-- does the same, reading the latest committed row for an UPDATE; SQLite
-- runs one write transaction at a time.
UPDATE payments
SET refunded_minor = refunded_minor + $2
WHERE id = $1 AND refunded_minor + $2 <= $3

-- name: insert_refund
INSERT INTO refunds (id, operation_id, payment_id, payment_operation_id, amount, reason, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)

-- name: list_refunds
-- The payment's amount and refunded total with its refunds, newest first,
-- in one statement (one snapshot), so the total matches the refunds. No
-- row: no such payment of the caller's; one row of NULL refund columns: a
-- payment without refunds.
SELECT p.amount, p.refunded_minor,
       r.id, r.payment_operation_id, r.amount, r.reason, r.created_at
FROM payments p
LEFT JOIN refunds r ON r.payment_id = p.id
WHERE p.id = $1 AND p.tenant = $2 AND p.principal = $3
ORDER BY r.id DESC

-- name: get_refund
SELECT r.id, r.payment_id, r.payment_operation_id, r.amount, r.reason, r.created_at
FROM refunds r
JOIN payments p ON p.id = r.payment_id
WHERE r.id = $1 AND r.payment_id = $2 AND p.tenant = $3 AND p.principal = $4

-- name: ping
SELECT 1
