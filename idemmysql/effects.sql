-- Named queries of effects and reconciliation (migration 002), loaded by
-- internal/sqlfile from effects.go. $1 is "now" as in queries.sql.

-- name: EffectBeginOperation
-- The fenced compare-and-set that marks the operation EXECUTING before
-- its first effect; no row matched: fenced (or the writer fence held).
UPDATE idem_operations
SET state = 'EXECUTING', updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE scope = $2 AND operation_id = $3 AND owner_gen = $4 AND state IN ('RESERVED', 'EXECUTING')
  AND retired_at IS NULL
  AND $5 >= (SELECT writer_epoch FROM idem_control WHERE id = 1 LOCK IN SHARE MODE);

-- name: EffectUpsert
-- The attempt row: created once per (operation, name) with its stable
-- downstream key and request; a later attempt only takes it over.
INSERT INTO idem_effects (operation_id, name, downstream_key, owner_gen, handle, result,
                          created_at, updated_at, request, request_key)
VALUES ($2, $3, $4, $5, NULL, NULL,
        coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)),
        coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), $6, $7)
ON DUPLICATE KEY UPDATE owner_gen = VALUES(owner_gen), updated_at = VALUES(updated_at);

-- name: EffectGet
SELECT operation_id, name, downstream_key, owner_gen, handle, result, created_at, updated_at,
       request, answer, request_key, answer_key
FROM idem_effects
WHERE operation_id = $1 AND name = $2;

-- name: EffectRecord
-- Fenced by the operation's generation and state, in one statement.
UPDATE idem_effects
SET handle = coalesce(nullif($6, ''), handle), result = coalesce(nullif($7, ''), result),
    answer_key = CASE WHEN $8 IS NULL THEN answer_key ELSE $9 END,
    answer = coalesce($8, answer),
    owner_gen = $4, updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE operation_id = $3 AND name = $5
  AND EXISTS (SELECT 1 FROM idem_operations AS o
              WHERE o.scope = $2 AND o.operation_id = $3 AND o.owner_gen = $4
                AND o.state IN ('EXECUTING', 'UNKNOWN'));

-- name: Effects
SELECT operation_id, name, downstream_key, owner_gen, handle, result, created_at, updated_at,
       request, answer, request_key, answer_key
FROM idem_effects
WHERE operation_id = $1
ORDER BY created_at, name;

-- name: MarkUnknown
UPDATE idem_operations
SET state = 'UNKNOWN', updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE scope = $2 AND operation_id = $3 AND owner_gen = $4 AND state = 'EXECUTING'
  AND retired_at IS NULL;

-- name: ReconcileOperation
-- The compare-and-set from UNKNOWN to the outcome, with the response;
-- retention counts from settlement. $11 is the scope OperationScope read
-- (migration 012: the primary key finds the record).
UPDATE idem_operations
SET state = $3, resp_status = $4, resp_media_type = $5, resp_location = $6, resp_etag = $7,
    resp_body = coalesce($8, x''), resp_digest = $9, resp_key = $10,
    expires_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) + (expires_at - created_at),
    updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE scope = $11 AND operation_id = $2 AND state = 'UNKNOWN';

-- name: ReconcileLog
INSERT INTO idem_reconciliations (operation_id, outcome, method, actor, evidence, created_at)
VALUES ($2, $3, $4, $5, $6, $1);

-- name: OperationExists
-- Through the primary key or the legacy table, as queries.sql's GetByID.
SELECT count(*) FROM (
SELECT scope FROM idem_operations
WHERE scope BETWEEN IF(CHAR_LENGTH($1) = 40 AND LEFT($1, 4) = 'op_1', RPAD(UNHEX(SUBSTRING($1, 15, 10)), 32, X'00'), NULL)
                AND IF(CHAR_LENGTH($1) = 40 AND LEFT($1, 4) = 'op_1', RPAD(UNHEX(SUBSTRING($1, 15, 10)), 32, X'FF'), NULL)
  AND CAST(operation_id AS BINARY) = CAST($1 AS BINARY)
UNION ALL
SELECT o.scope FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
WHERE l.operation_id = $1 AND CAST(o.operation_id AS BINARY) = CAST($1 AS BINARY)
) AS found;

-- name: OperationScope
-- Through the primary key or the legacy table, as queries.sql's GetByID.
SELECT scope FROM idem_operations
WHERE scope BETWEEN IF(CHAR_LENGTH($1) = 40 AND LEFT($1, 4) = 'op_1', RPAD(UNHEX(SUBSTRING($1, 15, 10)), 32, X'00'), NULL)
                AND IF(CHAR_LENGTH($1) = 40 AND LEFT($1, 4) = 'op_1', RPAD(UNHEX(SUBSTRING($1, 15, 10)), 32, X'FF'), NULL)
  AND CAST(operation_id AS BINARY) = CAST($1 AS BINARY)
UNION ALL
SELECT o.scope FROM idem_legacy_operation_ids l JOIN idem_operations o ON o.scope = l.scope
WHERE l.operation_id = $1 AND CAST(o.operation_id AS BINARY) = CAST($1 AS BINARY);

-- name: Reconciliations
SELECT id, operation_id, outcome, method, actor, evidence, created_at
FROM idem_reconciliations
WHERE operation_id = $1
ORDER BY id;

-- name: ListOperations
-- $2: the state or NULL; $3: OlderThan in µs (<= 0: any age); $4: the
-- limit; $5, $6: the keyset cursor (created_at, operation_id) or NULL.
SELECT scope, operation_id, operation, owner, fingerprint, contract, state,
       owner_gen, writer_epoch, lease_until, expires_at, created_at, updated_at,
       resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations
WHERE ($2 IS NULL OR state = $2)
  AND ($3 <= 0 OR created_at <= coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) - $3)
  AND ($6 IS NULL OR created_at > $5 OR (created_at = $5 AND operation_id > $6))
ORDER BY created_at, operation_id
LIMIT $4;

-- name: CountOperations
SELECT count(*)
FROM idem_operations
WHERE ($2 IS NULL OR state = $2)
  AND ($3 <= 0 OR created_at <= coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) - $3);
