-- Named queries of effects outside the database, unknown outcomes and
-- reconciliation (migration 005), loaded by internal/sqlfile from
-- effects.go. Conventions as in queries.sql: $1 is "now" wherever a
-- statement needs it (NULL means database time); times and durations are
-- INTEGER microseconds.
--
-- None of these statements lists the record columns: effects.go reads a
-- record it changed with queries.sql's GetByID, in the same transaction,
-- so the record's shape is defined in one place.

-- name: EffectBeginOperation
-- $2 scope, $3 operation_id, $4 owner_gen, $5 writer epoch. The fenced
-- move RESERVED|EXECUTING → EXECUTING. No row: fenced.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_operations
SET state = 'EXECUTING', updated_at = clock.now
FROM clock
WHERE scope = $2 AND operation_id = $3 AND owner_gen = $4 AND state IN ('RESERVED', 'EXECUTING')
  AND retired_at IS NULL
  AND $5 >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
RETURNING operation_id;

-- name: EffectUpsert
-- $2 operation_id, $3 name, $4 downstream key, $5 owner_gen, $6 request, $7 its key ID (NULL: plaintext; migration 009).
-- Inserts the attempt with the request and an empty handle, or keeps the
-- existing one — its key, request, handle and result untouched — and
-- hands it to generation $5. (WHERE
-- true keeps SQLite from reading ON CONFLICT as a join constraint.)
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_effects (operation_id, name, downstream_key, owner_gen, handle, result,
                          created_at, updated_at, request, request_key)
SELECT $2, $3, $4, $5, NULL, NULL, now, now, $6, $7 FROM clock WHERE true
ON CONFLICT (operation_id, name) DO UPDATE
SET owner_gen = excluded.owner_gen, updated_at = excluded.updated_at
RETURNING operation_id, name, downstream_key, owner_gen, handle, result, created_at, updated_at,
          request, answer, request_key, answer_key;

-- name: EffectRecord
-- $2 scope, $3 operation_id, $4 owner_gen, $5 name, $6 handle, $7 result
-- ('' keeps the stored value), $8 answer (NULL keeps it), $9 its key ID (NULL: plaintext). The attempt passes to generation $4 (the
-- trigger refuses a lower one). Run in a write transaction: SQLite's
-- single writer keeps the fenced record from changing meanwhile.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_effects
SET handle = coalesce(nullif($6, ''), handle), result = coalesce(nullif($7, ''), result),
    answer = coalesce($8, answer), answer_key = CASE WHEN $8 IS NULL THEN answer_key ELSE $9 END,
    owner_gen = $4, updated_at = clock.now
FROM clock
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
-- $2 scope, $3 operation_id, $4 owner_gen.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_operations
SET state = 'UNKNOWN', updated_at = clock.now
FROM clock
WHERE scope = $2 AND operation_id = $3 AND owner_gen = $4 AND state = 'EXECUTING'
  AND retired_at IS NULL
RETURNING operation_id;

-- name: ReconcileOperation
-- $2 operation_id, $3 outcome, $4 status, $5 media type, $6 location,
-- $7 etag, $8 body, $9 digest, $10 the body's key ID (NULL: plaintext;
-- migration 009), $11 the scope OperationScope read (migration 021: the
-- primary key finds the record). The compare-and-set UNKNOWN → outcome;
-- no row: not UNKNOWN, or no such record.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_operations
SET state = $3, resp_status = $4, resp_media_type = $5, resp_location = $6, resp_etag = $7,
    resp_body = coalesce($8, x''), resp_digest = $9, resp_key = $10, updated_at = clock.now,
    expires_at = clock.now + (expires_at - created_at) -- retention from settlement (migration 011)
FROM clock
WHERE scope = $11 AND operation_id = $2 AND state = 'UNKNOWN'
RETURNING operation_id;

-- name: ReconcileLog
-- $2 operation_id, $3 outcome, $4 method, $5 actor, $6 evidence.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_reconciliations (operation_id, outcome, method, actor, evidence, created_at)
SELECT $2, $3, $4, $5, $6, now FROM clock
RETURNING id;

-- name: OperationExists
-- Through the primary key or the legacy table, as queries.sql's GetByID.
SELECT count(*) FROM idem_operations
WHERE (scope BETWEEN unhex(CASE WHEN length($1) = 40 AND substr($1, 1, 4) = 'op_1' THEN substr($1, 15, 10) || '000000000000000000000000000000000000000000000000000000' END)
                AND unhex(CASE WHEN length($1) = 40 AND substr($1, 1, 4) = 'op_1' THEN substr($1, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF' END)
       OR scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = $1))
  AND operation_id = $1;

-- name: Reconciliations
SELECT id, operation_id, outcome, method, actor, evidence, created_at
FROM idem_reconciliations
WHERE operation_id = $1
ORDER BY id;

-- name: ListOperationIDs
-- $2 state or NULL for any, $3 minimum age µs (0: any age), $4 limit,
-- $5 and $6 the created_at and operation ID to list after (NULL: from the
-- start).
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
SELECT o.operation_id
FROM idem_operations AS o, clock AS c
WHERE ($2 IS NULL OR o.state = $2) AND ($3 <= 0 OR o.created_at <= c.now - $3)
  AND ($6 IS NULL OR (o.created_at, o.operation_id) > ($5, $6))
ORDER BY o.created_at, o.operation_id
LIMIT $4;

-- name: ListUnknownOperationIDs
-- ListOperationIDs for state UNKNOWN ($2 unused), with the literal state
-- so that the partial index idem_operations_unknown_age serves it.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
SELECT o.operation_id
FROM idem_operations AS o, clock AS c
WHERE o.state = 'UNKNOWN' AND ($2 IS NULL OR $2 = 'UNKNOWN')
  AND ($3 <= 0 OR o.created_at <= c.now - $3)
  AND ($6 IS NULL OR (o.created_at, o.operation_id) > ($5, $6))
ORDER BY o.created_at, o.operation_id
LIMIT $4;

-- name: CountOperations
-- $1 now, $2 state or NULL for any, $3 minimum age µs (0: any age): the
-- number of records ListOperationIDs would list without a limit.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
SELECT count(*)
FROM idem_operations AS o, clock AS c
WHERE ($2 IS NULL OR o.state = $2) AND ($3 <= 0 OR o.created_at <= c.now - $3);

-- name: CountUnknownOperations
-- CountOperations for state UNKNOWN ($2 unused), with the literal state
-- so that the partial index idem_operations_unknown_age serves it.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
SELECT count(*)
FROM idem_operations AS o, clock AS c
WHERE o.state = 'UNKNOWN' AND ($2 IS NULL OR $2 = 'UNKNOWN')
  AND ($3 <= 0 OR o.created_at <= c.now - $3);

-- name: OperationScope
-- $1 operation_id: the record's scope, which the associated data of its
-- sealed response body names (registry.ResponseAAD).
-- Through the primary key or the legacy table, as queries.sql's GetByID.
SELECT scope FROM idem_operations
WHERE (scope BETWEEN unhex(CASE WHEN length($1) = 40 AND substr($1, 1, 4) = 'op_1' THEN substr($1, 15, 10) || '000000000000000000000000000000000000000000000000000000' END)
                AND unhex(CASE WHEN length($1) = 40 AND substr($1, 1, 4) = 'op_1' THEN substr($1, 15, 10) || 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF' END)
       OR scope = (SELECT l.scope FROM idem_legacy_operation_ids l WHERE l.operation_id = $1))
  AND operation_id = $1;
