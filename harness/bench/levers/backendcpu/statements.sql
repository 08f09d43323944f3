-- Statements of backendcpu (main.go): the transactions of levers.sh
-- without pgbench's variables. $1 a random text, $2 a random 32-byte
-- value, $3 another, $4 a 32-bit integer. TABLE is replaced by the
-- variant's record table.

-- name: pay
INSERT INTO pay (id, amount, currency, payee, memo) VALUES ($1, 12.50, 'EUR', 'acct_1', 'invoice 2026-117');

-- name: ob
INSERT INTO ob (message_id, topic, payload) VALUES ($1, 'payment.created', convert_to(repeat('x', 180), 'UTF8'));

-- name: floor
INSERT INTO floor (scope) VALUES ($1);

-- name: claim
SELECT idem_claim($1, $2);

-- name: record
INSERT INTO TABLE (scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest) VALUES ($1, $2, 'payments.create', decode(md5('owner')||md5('owner2'), 'hex'), $3, 'http.idempotency.v1', 'SUCCEEDED', 1, 1, statement_timestamp(), statement_timestamp() + interval '1 day', statement_timestamp(), statement_timestamp(), 201, 'application/json', '/v1/payments/pay_1', '', convert_to(repeat('y', 260), 'UTF8'), $4);
