\set a random(1, 1000000000000000)
BEGIN;
SET LOCAL synchronous_commit = off;
INSERT INTO tp_split (scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at, tenant_hash) VALUES (decode(md5(:client_id || '-' || :a) || md5(:a || '-' || :client_id), 'hex'), 'op_' || upper(substr(md5(:a || 'op' || :client_id), 1, 26)), 'payments.create', decode(md5('owner')||md5('owner2'), 'hex'), decode(md5(random()::text)||md5(random()::text), 'hex'), 'http.idempotency.v1', 'RESERVED', 1, 1, statement_timestamp() + interval '30 seconds', statement_timestamp() + interval '1 day', statement_timestamp(), statement_timestamp(), decode(md5('tenant')||md5('tenant2'), 'hex'));
INSERT INTO tp_split_inflight (scope, owner, operation, state, lease_until, tenant_hash, created_at) VALUES (decode(md5(:client_id || '-' || :a) || md5(:a || '-' || :client_id), 'hex'), decode(md5('owner')||md5('owner2'), 'hex'), 'payments.create', 'RESERVED', statement_timestamp() + interval '30 seconds', decode(md5('tenant')||md5('tenant2'), 'hex'), statement_timestamp());
COMMIT;
BEGIN;
INSERT INTO pay (id, amount, currency, payee, memo) VALUES (:client_id || '-' || :a, 12.50, 'EUR', 'acct_1', 'invoice 2026-117');
INSERT INTO ob (message_id, topic, payload) VALUES (md5(:client_id || '-' || :a), 'payment.created', convert_to(repeat('x', 180), 'UTF8'));
COMMIT;
BEGIN;
UPDATE tp_split o SET state = 'SUCCEEDED', resp_status = 201, resp_media_type = 'application/json', resp_location = '/v1/payments/pay_1', resp_etag = '', resp_body = convert_to(repeat('y', 260), 'UTF8'), resp_digest = decode(md5(random()::text)||md5(random()::text), 'hex'), updated_at = statement_timestamp(), expires_at = statement_timestamp() + (o.expires_at - o.created_at) WHERE o.scope = decode(md5(:client_id || '-' || :a) || md5(:a || '-' || :client_id), 'hex') AND o.owner_gen = 1 AND o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL;
DELETE FROM tp_split_inflight WHERE scope = decode(md5(:client_id || '-' || :a) || md5(:a || '-' || :client_id), 'hex');
INSERT INTO tp_split_retire (scope, expires_at) VALUES (decode(md5(:client_id || '-' || :a) || md5(:a || '-' || :client_id), 'hex'), statement_timestamp() + interval '1 day');
COMMIT;
