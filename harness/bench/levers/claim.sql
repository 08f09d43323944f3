\set a random(1, 1000000000)
BEGIN;
SELECT idem_claim(decode(md5(random()::text)||md5(random()::text), 'hex'), :a);
INSERT INTO pay (id, amount, currency, payee, memo) VALUES (:client_id || '-' || :a || '-' || md5(random()::text), 12.50, 'EUR', 'acct_1', 'invoice 2026-117');
INSERT INTO ob (message_id, topic, payload) VALUES (md5(random()::text || :a), 'payment.created', convert_to(repeat('x', 180), 'UTF8'));
INSERT INTO TABLE (scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest) SELECT s, 'op_' || upper(substr(md5(random()::text), 1, 26)), 'payments.create', decode(md5('owner')||md5('owner2'), 'hex'), decode(md5(random()::text)||md5(random()::text), 'hex'), 'http.idempotency.v1', 'SUCCEEDED', 1, 1, statement_timestamp(), statement_timestamp() + interval '1 day', statement_timestamp(), statement_timestamp(), 201, 'application/json', '/v1/payments/pay_1', '', convert_to(repeat('y', 260), 'UTF8'), decode(md5(random()::text)||md5(random()::text), 'hex') FROM (SELECT decode(md5(random()::text)||md5(random()::text), 'hex') AS s) AS x;
COMMIT;
