\set a random(1, 1000000000)
BEGIN;
INSERT INTO pay (id, amount, currency, payee, memo) VALUES (:client_id || '-' || :a || '-' || md5(random()::text), 12.50, 'EUR', 'acct_1', 'invoice 2026-117');
INSERT INTO ob (message_id, topic, payload) VALUES (md5(random()::text || :a), 'payment.created', convert_to(repeat('x', 180), 'UTF8'));
COMMIT;
