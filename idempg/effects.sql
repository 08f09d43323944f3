-- Named queries of effects outside the database, unknown outcomes and
-- reconciliation (migration 005), loaded by internal/sqlfile from
-- effects.go. Conventions as in queries.sql: "now" is one parameter,
-- NULL meaning database time; durations are bigint microseconds.
--
-- None of these statements lists the record columns: effects.go reads a
-- record it changed with queries.sql's GetByID, in the same transaction,
-- so the record's shape is defined in one place.

-- name: EffectDurable
-- Makes the current transaction's commit wait for its WAL to be flushed
-- (and, with synchronous standbys, for them) even when the session or the
-- server runs with synchronous_commit off or local. Stronger settings
-- (on, remote_write, remote_apply) are kept. Transaction-local: it ends
-- with the transaction. See BeginEffect for why.
SELECT set_config('synchronous_commit', 'on', true)
WHERE current_setting('synchronous_commit') IN ('off', 'local');

-- name: EffectBeginOperation
-- $1 scope, $2 operation_id, $3 owner_gen, $4 now, $5 writer epoch.
-- The fenced move RESERVED|EXECUTING → EXECUTING; it takes the record's
-- row lock for the rest of the transaction. No row: fenced.
WITH clock AS (SELECT coalesce($4::timestamptz, statement_timestamp()) AS t)
UPDATE idem_operations o
SET state = 'EXECUTING', updated_at = clock.t
FROM clock
WHERE o.scope = $1 AND o.operation_id = $2 AND o.owner_gen = $3
  AND o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL
  AND $5::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
RETURNING o.operation_id;

-- name: EffectUpsert
-- $1 operation_id, $2 name, $3 downstream key, $4 owner_gen, $5 now,
-- $6 request, $7 its key ID (NULL: plaintext; migration 010). Inserts the attempt with the request and an empty handle, or
-- keeps the existing one — its key, request, handle and result untouched —
-- and hands it to generation $4.
WITH clock AS (SELECT coalesce($5::timestamptz, statement_timestamp()) AS t)
INSERT INTO idem_effects AS e (operation_id, name, downstream_key, owner_gen, handle, result,
                               created_at, updated_at, request, request_key)
SELECT $1::text, $2::text, $3::text, $4::bigint, NULL, NULL, t, t, $6::bytea, $7::text
FROM clock
ON CONFLICT (operation_id, name) DO UPDATE
SET owner_gen = EXCLUDED.owner_gen, updated_at = EXCLUDED.updated_at
RETURNING e.operation_id, e.name, e.downstream_key, e.owner_gen, e.handle, e.result,
          e.created_at, e.updated_at, e.request, e.answer, e.request_key, e.answer_key;

-- name: EffectRecord
-- $1 scope, $2 operation_id, $3 owner_gen, $4 name, $5 handle, $6 result
-- ('' keeps the stored value), $7 now, $8 answer (NULL keeps it), $9 its key ID (NULL: plaintext). The attempt passes to generation
-- $3 (the trigger refuses a lower one). The fence CTE share-locks the
-- record (so a concurrent takeover either commits first, and the fence
-- then re-reads the new generation and fails, or waits for this one).
-- set_config(..., true) turns synchronous_commit off for this statement's
-- own (implicit) transaction only; see Store.RecordEffect for why that is
-- safe.
WITH clock AS (SELECT coalesce($7::timestamptz, statement_timestamp()) AS t),
async AS (SELECT set_config('synchronous_commit', 'off', true) AS v),
fence AS (
    SELECT 1 FROM idem_operations o
    WHERE o.scope = $1 AND o.operation_id = $2 AND o.owner_gen = $3
      AND o.state IN ('EXECUTING', 'UNKNOWN')
    FOR SHARE
)
UPDATE idem_effects e
SET handle = coalesce(nullif($5::text, ''), e.handle),
    result = coalesce(nullif($6::text, ''), e.result),
    answer = coalesce($8::bytea, e.answer),
    answer_key = CASE WHEN $8::bytea IS NULL THEN e.answer_key ELSE $9::text END,
    owner_gen = $3::bigint, updated_at = clock.t
FROM clock, fence, async
WHERE e.operation_id = $2 AND e.name = $4;

-- name: Effects
SELECT operation_id, name, downstream_key, owner_gen, handle, result, created_at, updated_at,
       request, answer, request_key, answer_key
FROM idem_effects
WHERE operation_id = $1
ORDER BY created_at, name;

-- name: MarkUnknown
-- $1 scope, $2 operation_id, $3 owner_gen, $4 now. Notifies the scope's
-- waiters, if any, as queries.sql TakeOver does.
WITH clock AS (SELECT coalesce($4::timestamptz, statement_timestamp()) AS t),
upd AS (
    UPDATE idem_operations o
    SET state = 'UNKNOWN', updated_at = clock.t
    FROM clock
    WHERE o.scope = $1 AND o.operation_id = $2 AND o.owner_gen = $3 AND o.state = 'EXECUTING'
      AND o.retired_at IS NULL
    RETURNING o.scope, o.operation_id
),
wake AS (
    SELECT pg_notify('idem_changed', encode(upd.scope, 'hex')) FROM upd
    WHERE EXISTS (SELECT 1 FROM idem_waiters w WHERE w.scope = upd.scope)
)
SELECT operation_id FROM upd
WHERE (SELECT count(*) FROM wake) >= 0;

-- name: Reconcile
-- $1 operation_id, $2 outcome, $3 status, $4 media type, $5 location,
-- $6 etag, $7 body, $8 digest, $9 method, $10 actor, $11 evidence,
-- $12 now, $13 message IDs, $14 topics, $15 payloads, $16 the body's key
-- ID (NULL: plaintext; migration 010), $17 the payloads' key IDs
-- (migration 016), $18 the messages' W3C traceparents (migration 021).
-- The compare-and-set
-- UNKNOWN → outcome, the outbox rows and the log row in one statement; the
-- outbox and log rows are inserted only if the update matched. Racing
-- calls wait for the row lock and then find the record no longer UNKNOWN.
WITH clock AS (SELECT coalesce($12::timestamptz, statement_timestamp()) AS t),
upd AS (
    UPDATE idem_operations o
    SET state = $2::text, resp_status = $3::integer, resp_media_type = $4::text,
        resp_location = $5::text, resp_etag = $6::text, resp_body = $7::bytea,
        resp_digest = $8::bytea, resp_key = $16::text, updated_at = clock.t,
        expires_at = clock.t + (o.expires_at - o.created_at) -- retention from settlement (migration 015)
    FROM clock
    WHERE o.scope BETWEEN idem_id_scope_lo($1) AND idem_id_scope_hi($1) AND o.operation_id = $1 AND o.state = 'UNKNOWN'
    RETURNING o.operation_id
),
outbox AS (
    INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, payload_key, trace_parent)
    SELECT m.id, $1::text, m.topic, m.payload, clock.t, m.key, m.trace
    FROM unnest($13::text[], $14::text[], $15::bytea[], $17::text[], $18::text[]) WITH ORDINALITY AS m(id, topic, payload, key, trace, n), clock
    WHERE EXISTS (SELECT 1 FROM upd)
    ORDER BY m.n
)
INSERT INTO idem_reconciliations (operation_id, outcome, method, actor, evidence, created_at)
SELECT upd.operation_id, $2::text, $9::text, $10::text, $11::text, clock.t
FROM upd, clock
RETURNING id;

-- name: OperationExists
SELECT EXISTS (SELECT 1 FROM idem_operations
               WHERE scope BETWEEN idem_id_scope_lo($1) AND idem_id_scope_hi($1) AND operation_id = $1);

-- name: Reconciliations
SELECT id, operation_id, outcome, method, actor, evidence, created_at
FROM idem_reconciliations
WHERE operation_id = $1
ORDER BY id;

-- name: ListOperationIDs
-- $1 state or NULL for any, $2 minimum age µs (0: any age), $3 now,
-- $4 limit, $5 and $6 the created_at and operation ID to list after
-- (NULL: from the start).
WITH clock AS (SELECT coalesce($3::timestamptz, statement_timestamp()) AS t)
SELECT o.operation_id
FROM idem_operations o, clock
WHERE ($1::text IS NULL OR o.state = $1::text)
  AND ($2::bigint <= 0 OR o.created_at <= clock.t - $2::bigint * interval '1 microsecond')
  AND ($6::text IS NULL OR (o.created_at, o.operation_id) > ($5::timestamptz, $6::text))
ORDER BY o.created_at, o.operation_id
LIMIT $4;

-- name: ListUnknownOperationIDs
-- ListOperationIDs for state UNKNOWN ($1 unused but typed), written with
-- the literal state so that the partial index idem_operations_unknown_age
-- (migration 005) serves it under a generic plan too.
WITH clock AS (SELECT coalesce($3::timestamptz, statement_timestamp()) AS t)
SELECT o.operation_id
FROM idem_operations o, clock
WHERE o.state = 'UNKNOWN' AND $1::text = 'UNKNOWN'
  AND ($2::bigint <= 0 OR o.created_at <= clock.t - $2::bigint * interval '1 microsecond')
  AND ($6::text IS NULL OR (o.created_at, o.operation_id) > ($5::timestamptz, $6::text))
ORDER BY o.created_at, o.operation_id
LIMIT $4;

-- name: CountOperations
-- $1 state or NULL for any, $2 minimum age µs (0: any age), $3 now: the
-- number of records ListOperationIDs would list without a limit.
WITH clock AS (SELECT coalesce($3::timestamptz, statement_timestamp()) AS t)
SELECT count(*)
FROM idem_operations o, clock
WHERE ($1::text IS NULL OR o.state = $1::text)
  AND ($2::bigint <= 0 OR o.created_at <= clock.t - $2::bigint * interval '1 microsecond');

-- name: CountUnknownOperations
-- CountOperations for state UNKNOWN ($1 unused but typed), with the literal
-- state, as ListUnknownOperationIDs, so that the partial index
-- idem_operations_unknown_age serves it under a generic plan too.
WITH clock AS (SELECT coalesce($3::timestamptz, statement_timestamp()) AS t)
SELECT count(*)
FROM idem_operations o, clock
WHERE o.state = 'UNKNOWN' AND $1::text = 'UNKNOWN'
  AND ($2::bigint <= 0 OR o.created_at <= clock.t - $2::bigint * interval '1 microsecond');

-- name: OperationScope
-- $1 operation_id: the record's scope, which the associated data of its
-- sealed response body names (registry.ResponseAAD).
SELECT scope FROM idem_operations
WHERE scope BETWEEN idem_id_scope_lo($1) AND idem_id_scope_hi($1) AND operation_id = $1;

-- name: EffectReserve
-- The acceptance point of an effect-bearing operation in the
-- one-transaction style (Store.ReserveEffect), sent after BEGIN and
-- EffectDurable and before EffectUpsert and COMMIT, all in one pipelined
-- batch: it inserts the scope's record directly in EXECUTING (∅ →
-- EXECUTING; no RESERVED row is ever written) at owner generation 1 with
-- its lease. Parameters as queries.sql Reserve, and $13 MaxActive (0: no
-- bound), counted as ClaimLimited counts. A plain INSERT, as Claim: a
-- concurrent insert of the scope makes this one wait for its transaction
-- and then fail with a unique violation. When nothing is inserted (the
-- writer fence or the active limit held) the statement fails with
-- SQLSTATE IDM01 (idem_fenced, migration 006). Either failure aborts the
-- transaction, so the COMMIT behind it in the same batch rolls back:
-- nothing of this call is written, and no attempt without its record.
WITH clock AS (SELECT coalesce($10::timestamptz, statement_timestamp()) AS t),
ins AS (
    INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
                                 state, owner_gen, writer_epoch, lease_until, expires_at,
                                 created_at, updated_at, tombstone_ttl, tenant_hash)
    SELECT $1::bytea, $2::text, $3::text, $4::bytea, $5::bytea, $6::text, 'EXECUTING', 1, $7::bigint,
           t + $8::bigint * interval '1 microsecond',
           t + $9::bigint * interval '1 microsecond',
           t, t, $11::bigint, $12::bytea
    FROM clock
    WHERE $7::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
      AND ($13::bigint <= 0 OR (SELECT count(*) FROM (
               SELECT 1 FROM idem_operations
               WHERE owner = $4::bytea AND operation = $3::text AND state IN ('RESERVED', 'EXECUTING', 'UNKNOWN')
                          AND (state = 'UNKNOWN' OR lease_until > clock.t)
               LIMIT $13::bigint) AS active) < $13::bigint)
    RETURNING scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
              writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
              resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
              retired_at, tombstone_until, tombstone_ttl, tenant_hash
)
SELECT * FROM ins
WHERE (SELECT CASE WHEN EXISTS (SELECT 1 FROM ins) THEN true ELSE idem_fenced($2::text) END);

-- name: FinishWithAnswers
-- queries.sql Finish (parameters $1–$19; CompleteEffects sends $16 true) that
-- also stores the downstream's answers to the operation's begun effects
-- (Store.CompleteEffects): $20 effect names, $21 handles, $22 results
-- ('' keeps the stored value), $23 answers (NULL keeps it), $24 the
-- answers' key IDs (NULL: plaintext). The answers are written only if the
-- record's compare-and-set matched; when it did not, or when an answer
-- names no stored attempt, the statement fails with SQLSTATE IDM01
-- (idem_fenced), which aborts the transaction, so the COMMIT behind it
-- commits neither the answers nor the outcome. The commit is synchronous
-- (the session's setting; no set_config here, unlike EffectRecord).
WITH clock AS (SELECT coalesce($10::timestamptz, statement_timestamp()) AS t),
upd AS (
    UPDATE idem_operations o
    SET state = $3::text, resp_status = $4::integer, resp_media_type = $5::text,
        resp_location = $6::text, resp_etag = $7::text, resp_body = $8::bytea,
        resp_digest = $9::bytea, resp_key = $17::text, updated_at = clock.t,
        expires_at = clock.t + (o.expires_at - o.created_at)
    FROM clock
    WHERE o.scope = $1 AND o.operation_id = $11 AND o.owner_gen = $2
      AND o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL
      AND $15::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1)
    RETURNING o.scope, o.operation_id, o.operation, o.owner, o.fingerprint, o.contract,
              o.state, o.owner_gen, o.writer_epoch, o.lease_until, o.expires_at,
              o.created_at, o.updated_at, o.resp_status, o.resp_media_type,
              o.resp_location, o.resp_etag, o.resp_body, o.resp_digest, o.resp_key,
              o.retired_at, o.tombstone_until, o.tombstone_ttl, o.tenant_hash
),
answered AS (
    UPDATE idem_effects e
    SET handle = coalesce(nullif(a.handle, ''), e.handle),
        result = coalesce(nullif(a.result, ''), e.result),
        answer = coalesce(a.answer, e.answer),
        answer_key = CASE WHEN a.answer IS NULL THEN e.answer_key ELSE a.key END,
        owner_gen = $2::bigint, updated_at = clock.t
    FROM unnest($20::text[], $21::text[], $22::text[], $23::bytea[], $24::text[]) AS a(name, handle, result, answer, key), clock
    WHERE e.operation_id = $11::text AND e.name = a.name AND EXISTS (SELECT 1 FROM upd)
    RETURNING e.name
),
outbox AS (
    INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, payload_key, trace_parent)
    SELECT m.id, $11::text, m.topic, m.payload, clock.t, m.key, m.trace
    FROM unnest($12::text[], $13::text[], $14::bytea[], $18::text[], $19::text[]) WITH ORDINALITY AS m(id, topic, payload, key, trace, n), clock
    WHERE EXISTS (SELECT 1 FROM upd)
    ORDER BY m.n
),
wake AS (
    SELECT pg_notify('idem_changed', encode(upd.scope, 'hex')) FROM upd
    WHERE EXISTS (SELECT 1 FROM idem_waiters w WHERE w.scope = upd.scope)
)
SELECT * FROM upd
WHERE (SELECT CASE WHEN EXISTS (SELECT 1 FROM upd)
                    AND (SELECT count(*) FROM answered) = coalesce(cardinality($20::text[]), 0)
                   THEN (SELECT count(*) FROM wake) >= 0
              WHEN $16::boolean THEN idem_fenced($11::text)
              ELSE false END);
