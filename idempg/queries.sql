-- Named queries of the idempg driver, loaded by internal/sqlfile.
--
-- Conventions:
--   * "now" is one parameter, read once per statement as
--     clock.t = coalesce($n::timestamptz, statement_timestamp()):
--     NULL means database time; the driver passes Options.Now when set.
--     statement_timestamp() is fixed for the whole statement, so every
--     column a statement writes gets the same instant.
--   * Durations are bigint microseconds: t + $n * interval '1 microsecond'.
--   * Every query returning a record lists the record columns in the order
--     that scanRecord (records.go) reads them.

-- name: CreateMigrationsTable
CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version    text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: LockMigrations
-- Serialises concurrent migrators until their transaction ends. The key is
-- an arbitrary constant reserved for idem ("idem" in ASCII).
SELECT pg_advisory_xact_lock(1768187245);

-- name: MigrationApplied
SELECT EXISTS (SELECT 1 FROM idem_schema_migrations WHERE version = $1);

-- name: RecordMigration
INSERT INTO idem_schema_migrations (version) VALUES ($1);

-- name: Reserve
-- $1 scope, $2 operation_id, $3 operation, $4 owner, $5 fingerprint,
-- $6 contract, $7 writer_epoch, $8 lease µs, $9 retention µs, $10 now,
-- $11 tombstone TTL µs (NULL: keep the tombstone forever; migration 004),
-- $12 tenant hash (registry.TenantHash; migration 020).
-- Store.Reserve sends it after a read found no record. It returns the
-- scope's record as this statement's snapshot sees it (created false:
-- another reservation committed since the read), or else the inserted
-- RESERVED record (created true). No row back means neither: a
-- concurrent transaction inserted the scope after the snapshot was taken
-- (ON CONFLICT waited for it), or it was released, or the writer fence
-- held (a writer epoch older than idem_control's inserts nothing); the
-- driver tells the cases apart.
-- set_config(..., true) turns synchronous_commit off for this statement's
-- own (implicit) transaction only; see Store.Reserve for why that is safe.
WITH clock AS (SELECT coalesce($10::timestamptz, statement_timestamp()) AS t),
     async AS (SELECT set_config('synchronous_commit', 'off', true) AS v),
     found AS (
         SELECT scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
                writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
                resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
                retired_at, tombstone_until, tombstone_ttl, tenant_hash
         FROM idem_operations WHERE scope = $1::bytea
     ),
     ins AS (
         INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
                                      state, owner_gen, writer_epoch, lease_until, expires_at,
                                      created_at, updated_at, tombstone_ttl, tenant_hash)
         SELECT $1::bytea, $2::text, $3::text, $4::bytea, $5::bytea, $6::text, 'RESERVED', 1, $7::bigint,
                t + $8::bigint * interval '1 microsecond',
                t + $9::bigint * interval '1 microsecond',
                t, t, $11::bigint, $12::bytea
         FROM clock, async
         WHERE NOT EXISTS (SELECT 1 FROM found)
           AND $7::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
         ON CONFLICT (scope) DO NOTHING
         RETURNING scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
                   writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
                   resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
                   retired_at, tombstone_until, tombstone_ttl, tenant_hash
     )
SELECT true AS created, ins.* FROM ins
UNION ALL
SELECT false AS created, found.* FROM found;

-- name: Claim
-- The in-transaction claim: a plain INSERT (no ON CONFLICT), so a racing
-- claim for the same scope waits for this transaction and then fails with a
-- unique violation. Parameters as Reserve.
WITH clock AS (SELECT coalesce($10::timestamptz, statement_timestamp()) AS t)
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
                             state, owner_gen, writer_epoch, lease_until, expires_at,
                             created_at, updated_at, tombstone_ttl, tenant_hash)
SELECT $1::bytea, $2::text, $3::text, $4::bytea, $5::bytea, $6::text, 'RESERVED', 1, $7::bigint,
       t + $8::bigint * interval '1 microsecond',
       t + $9::bigint * interval '1 microsecond',
       t, t, $11::bigint, $12::bytea
FROM clock
WHERE $7::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
          writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
          resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: ReserveLimited
-- Reserve with Claim.MaxActive: parameters as Reserve, $13 MaxActive (> 0) ($12 is the tenant hash).
-- An existing scope's record is returned as by Reserve, whatever the
-- count. Otherwise the row is inserted only while the owner holds fewer
-- than $13 active records of the operation — UNKNOWN ones, and RESERVED
-- or EXECUTING ones whose lease has not expired (an abandoned reservation
-- stops counting when its lease expires; migration 015) — counted in this
-- statement's snapshot (idem_operations_inflight, migration 009; the LIMIT
-- stops the count at $13). Uncommitted reservations of concurrent
-- statements are not counted, hence the overshoot documented on
-- Claim.MaxActive. No row back means, besides Reserve's cases, that the
-- limit held: when the count filters the row out, ON CONFLICT is never
-- reached, and the driver tells the cases apart.
-- It is not Reserve with a NULL limit meaning none: under the generic plan
-- PostgreSQL settles on after five executions, "$13 IS NULL OR count < $13"
-- still runs the count, LIMIT NULL counting every active record of the
-- owner (measured on PostgreSQL 15 with 31,600 of them: 11 ms a call
-- against Reserve's 0.28 ms).
WITH clock AS (SELECT coalesce($10::timestamptz, statement_timestamp()) AS t),
     async AS (SELECT set_config('synchronous_commit', 'off', true) AS v),
     found AS (
         SELECT scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
                writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
                resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
                retired_at, tombstone_until, tombstone_ttl, tenant_hash
         FROM idem_operations WHERE scope = $1::bytea
     ),
     ins AS (
         INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
                                      state, owner_gen, writer_epoch, lease_until, expires_at,
                                      created_at, updated_at, tombstone_ttl, tenant_hash)
         SELECT $1::bytea, $2::text, $3::text, $4::bytea, $5::bytea, $6::text, 'RESERVED', 1, $7::bigint,
                t + $8::bigint * interval '1 microsecond',
                t + $9::bigint * interval '1 microsecond',
                t, t, $11::bigint, $12::bytea
         FROM clock, async
         WHERE NOT EXISTS (SELECT 1 FROM found)
           AND $7::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1)
           AND (SELECT count(*) FROM (
                    SELECT 1 FROM idem_operations
                    WHERE owner = $4::bytea AND operation = $3::text AND state IN ('RESERVED', 'EXECUTING', 'UNKNOWN')
                      AND (state = 'UNKNOWN' OR lease_until > clock.t)
                    LIMIT $13::bigint) AS active) < $13::bigint
         ON CONFLICT (scope) DO NOTHING
         RETURNING scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
                   writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
                   resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
                   retired_at, tombstone_until, tombstone_ttl, tenant_hash
     )
SELECT true AS created, ins.* FROM ins
UNION ALL
SELECT false AS created, found.* FROM found;

-- name: ClaimLimited
-- Claim with Claim.MaxActive: parameters as Reserve, $13 MaxActive (> 0) ($12 is the tenant hash).
-- No row back means the limit held (the insert was not attempted); a
-- duplicate scope still fails with a unique violation when it was.
WITH clock AS (SELECT coalesce($10::timestamptz, statement_timestamp()) AS t)
INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
                             state, owner_gen, writer_epoch, lease_until, expires_at,
                             created_at, updated_at, tombstone_ttl, tenant_hash)
SELECT $1::bytea, $2::text, $3::text, $4::bytea, $5::bytea, $6::text, 'RESERVED', 1, $7::bigint,
       t + $8::bigint * interval '1 microsecond',
       t + $9::bigint * interval '1 microsecond',
       t, t, $11::bigint, $12::bytea
FROM clock
WHERE $7::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1)
  AND (SELECT count(*) FROM (
           SELECT 1 FROM idem_operations
           WHERE owner = $4::bytea AND operation = $3::text AND state IN ('RESERVED', 'EXECUTING', 'UNKNOWN')
                      AND (state = 'UNKNOWN' OR lease_until > clock.t)
           LIMIT $13::bigint) AS active) < $13::bigint
RETURNING scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
          writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
          resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
          retired_at, tombstone_until, tombstone_ttl, tenant_hash;

-- name: ActiveLimitReached
-- $1 owner, $2 operation, $3 MaxActive, $4 now: whether the owner holds
-- at least $3 active records of the operation, counted as ReserveLimited
-- counts them.
WITH clock AS (SELECT coalesce($4::timestamptz, statement_timestamp()) AS t)
SELECT count(*) >= $3::bigint FROM (
    SELECT 1 FROM idem_operations, clock
    WHERE owner = $1::bytea AND operation = $2::text AND state IN ('RESERVED', 'EXECUTING', 'UNKNOWN')
      AND (state = 'UNKNOWN' OR lease_until > clock.t)
    LIMIT $3::bigint) AS active;

-- name: GetByScope
SELECT scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
       writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
       resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations
WHERE scope = $1;

-- name: GetByID
SELECT scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
       writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
       resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
       retired_at, tombstone_until, tombstone_ttl, tenant_hash
FROM idem_operations
-- Through the primary key (migration 026): the scopes the ID leads to,
-- then the full ID; a malformed ID names no scope and finds nothing.
WHERE scope BETWEEN idem_id_scope_lo($1) AND idem_id_scope_hi($1) AND operation_id = $1;

-- name: Finish
-- The fenced compare-and-set that records an outcome, plus its outbox rows,
-- in one statement. $1 scope, $2 owner_gen, $3 state, $4 status,
-- $5 media type, $6 location, $7 etag, $8 body, $9 digest, $10 now,
-- $11 operation_id, $12 message IDs, $13 topics, $14 payloads. The outbox
-- rows are inserted only if the update matched. $15 is the committing
-- writer's epoch (Record.WriterEpoch): older than idem_control's, nothing
-- matches (the writer fence, migration 003). When nothing matches and
-- $16 is true, the statement fails with SQLSTATE IDM01 (idem_fenced,
-- migration 006), which aborts the transaction: a COMMIT sent after it in
-- the same round trip rolls back instead (Complete). With $16 false it
-- returns no row and the transaction stays usable (ClaimAndExecute).
-- $17 is the ID of the key that sealed the body, NULL for plaintext
-- (migration 010). When the scope has waiters (idem_waiters, migration
-- 012) it notifies idem_changed with the scope in hex; see TakeOver.
-- $19 the messages' W3C traceparents (NULL: none; migration 021).
-- Retention counts from settlement (migration 015): expires_at becomes
-- this instant plus the retention, which Reserve stored as expires_at -
-- created_at. An abandoned reservation's tombstone (retired_at set) is
-- fenced. $18 the IDs of the keys that sealed the payloads (NULLs:
-- plaintext; migration 016).
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
outbox AS (
    INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, payload_key, trace_parent)
    SELECT m.id, $11::text, m.topic, m.payload, clock.t, m.key, m.trace
    FROM unnest($12::text[], $13::text[], $14::bytea[], $18::text[], $19::text[]) WITH ORDINALITY AS m(id, topic, payload, key, trace, n), clock
    WHERE EXISTS (SELECT 1 FROM upd)
    ORDER BY m.n
),
wake AS (
    -- Wakes the waiters of the scope (migration 012), if it has any; see
    -- the wake CTE of TakeOver.
    SELECT pg_notify('idem_changed', encode(upd.scope, 'hex')) FROM upd
    WHERE EXISTS (SELECT 1 FROM idem_waiters w WHERE w.scope = upd.scope)
)
SELECT * FROM upd
WHERE (SELECT CASE WHEN EXISTS (SELECT 1 FROM upd) THEN (SELECT count(*) FROM wake) >= 0
              WHEN $16::boolean THEN idem_fenced($11::text)
              ELSE false END);

-- name: ClaimScope
-- The claim of the one-transaction style (Store.ExecuteOnce; migration
-- 011), sent with BEGIN in front of the business function's first
-- statement: $1 scope, $2 the advisory lock's key (the scope's first four
-- bytes). Waits while another transaction holds the scope's lock, then
-- fails with IDM02 when the scope has a record.
SELECT idem_claim($1::bytea, $2::integer);

-- name: InsertOutcome
-- The one-transaction acceptance point (Store.ExecuteOnce), sent with
-- COMMIT in one round trip at the end of the business transaction: it
-- inserts the scope's record already terminal, with its response snapshot
-- and outbox rows. $1 scope, $2 operation_id, $3 operation, $4 owner,
-- $5 fingerprint, $6 contract, $7 writer_epoch, $8 retention µs, $9 now,
-- $10 tombstone TTL µs (as Reserve's $11), $11 state, $12 status,
-- $13 media type, $14 location, $15 etag, $16 body, $17 digest,
-- $18 message IDs, $19 topics, $20 payloads, $21 the body's key ID (NULL:
-- plaintext; migration 010), $22 the payloads' key IDs (migration 016),
-- $23 the tenant hash (migration 020), $24 the messages' W3C traceparents
-- (NULL: none; migration 021).
-- Nobody owns a terminal
-- record, so lease_until is the insert's instant.
-- A plain INSERT: a concurrent transaction that inserted the scope first
-- makes this one wait for its end and then fail with a unique violation,
-- which aborts the transaction, so the COMMIT behind it rolls back the
-- business writes too. A writer epoch older than idem_control's inserts
-- nothing and fails the statement with IDM01 (idem_fenced, migration 006),
-- with the same effect.
WITH clock AS (SELECT coalesce($9::timestamptz, statement_timestamp()) AS t),
ins AS (
    INSERT INTO idem_operations (scope, operation_id, operation, owner, fingerprint, contract,
                                 state, owner_gen, writer_epoch, lease_until, expires_at,
                                 created_at, updated_at, tombstone_ttl,
                                 resp_status, resp_media_type, resp_location, resp_etag,
                                 resp_body, resp_digest, resp_key, tenant_hash)
    SELECT $1::bytea, $2::text, $3::text, $4::bytea, $5::bytea, $6::text, $11::text, 1, $7::bigint,
           t, t + $8::bigint * interval '1 microsecond', t, t, $10::bigint,
           $12::integer, $13::text, $14::text, $15::text, $16::bytea, $17::bytea, $21::text, $23::bytea
    FROM clock
    WHERE $7::bigint >= (SELECT writer_epoch FROM idem_control WHERE id = 1) -- the writer fence (migration 003)
    RETURNING scope, operation_id, operation, owner, fingerprint, contract, state, owner_gen,
              writer_epoch, lease_until, expires_at, created_at, updated_at, resp_status,
              resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key,
              retired_at, tombstone_until, tombstone_ttl, tenant_hash
),
outbox AS (
    INSERT INTO idem_outbox (message_id, operation_id, topic, payload, created_at, payload_key, trace_parent)
    SELECT m.id, $2::text, m.topic, m.payload, clock.t, m.key, m.trace
    FROM unnest($18::text[], $19::text[], $20::bytea[], $22::text[], $24::text[]) WITH ORDINALITY AS m(id, topic, payload, key, trace, n), clock
    WHERE EXISTS (SELECT 1 FROM ins)
    ORDER BY m.n
)
SELECT * FROM ins
WHERE (SELECT CASE WHEN EXISTS (SELECT 1 FROM ins) THEN true ELSE idem_fenced($2::text) END);

-- name: Release
-- $1 scope, $2 owner_gen, $3 operation_id: generations restart at 1 for
-- every new reservation of a scope, so the operation ID is part of the fence.
-- Returns one row per deleted record (the driver counts them) and
-- notifies the scope's waiters, if any (see TakeOver).
WITH del AS (
    DELETE FROM idem_operations
    WHERE scope = $1 AND operation_id = $3 AND owner_gen = $2 AND state = 'RESERVED' AND retired_at IS NULL
    RETURNING scope
),
wake AS (
    SELECT pg_notify('idem_changed', encode(del.scope, 'hex')) FROM del
    WHERE EXISTS (SELECT 1 FROM idem_waiters w WHERE w.scope = del.scope)
)
SELECT scope FROM del
WHERE (SELECT count(*) FROM wake) >= 0;

-- name: TakeOver
-- $1 scope, $2 owner_gen, $3 lease µs, $4 now, $5 operation_id.
-- The wake CTE notifies idem_changed with the scope in hex when the scope
-- has waiters (idem_waiters, migration 012; Store.Watch), and only then:
-- a transaction that ran NOTIFY takes a global lock at commit, so
-- without waiters the cost is one probe of an almost always empty table.
-- A CTE that only reads runs only as far as it is read: the one-time
-- filter "(SELECT count(*) FROM wake) >= 0" (always true) reads it whole,
-- so the notify really runs. Finish and Release (and effects.sql
-- MarkUnknown) do the same.
WITH clock AS (SELECT coalesce($4::timestamptz, statement_timestamp()) AS t),
upd AS (
    UPDATE idem_operations o
    SET owner_gen = o.owner_gen + 1,
        lease_until = clock.t + $3::bigint * interval '1 microsecond',
        updated_at = clock.t
    FROM clock
    WHERE o.scope = $1 AND o.operation_id = $5 AND o.owner_gen = $2
      AND o.state IN ('RESERVED', 'EXECUTING') AND o.lease_until <= clock.t
      AND o.retired_at IS NULL -- an abandoned reservation's tombstone is not taken over (migration 015)
    RETURNING o.scope, o.operation_id, o.operation, o.owner, o.fingerprint, o.contract,
              o.state, o.owner_gen, o.writer_epoch, o.lease_until, o.expires_at,
              o.created_at, o.updated_at, o.resp_status, o.resp_media_type,
              o.resp_location, o.resp_etag, o.resp_body, o.resp_digest, o.resp_key,
              o.retired_at, o.tombstone_until, o.tombstone_ttl, o.tenant_hash
),
wake AS (
    SELECT pg_notify('idem_changed', encode(upd.scope, 'hex')) FROM upd
    WHERE EXISTS (SELECT 1 FROM idem_waiters w WHERE w.scope = upd.scope)
)
SELECT * FROM upd
WHERE (SELECT count(*) FROM wake) >= 0;

-- name: ClaimOutbox
-- $1 limit, $2 lease µs, $3 now. SKIP LOCKED lets relays claim disjoint
-- batches at once; a claim, or a failed attempt's backoff (migration 008),
-- lasts until claimed_until. Dead letters are never claimed. Nor are the
-- messages of a fenced tenant (migration 020): their copies are delivered
-- from the tenant's new registry. The fence test runs only when some
-- tenant is fenced (the one-time EXISTS; the table is almost always
-- empty), so it costs nothing otherwise.
WITH clock AS (SELECT coalesce($3::timestamptz, statement_timestamp()) AS t),
claimed AS (
    UPDATE idem_outbox
    SET claimed_until = (SELECT t FROM clock) + $2::bigint * interval '1 microsecond'
    WHERE seq IN (
        SELECT seq FROM idem_outbox, clock
        WHERE published_at IS NULL AND dead_at IS NULL
          AND (claimed_until IS NULL OR claimed_until <= clock.t)
          AND (NOT EXISTS (SELECT 1 FROM idem_tenant_fences)
               OR NOT EXISTS (SELECT 1 FROM idem_tenant_fences f JOIN idem_operations o ON o.tenant_hash = f.tenant_hash
                              WHERE o.scope BETWEEN idem_id_scope_lo(idem_outbox.operation_id) AND idem_id_scope_hi(idem_outbox.operation_id)
                                AND o.operation_id = idem_outbox.operation_id))
        ORDER BY seq
        LIMIT $1
        FOR UPDATE OF idem_outbox SKIP LOCKED
    )
    RETURNING seq, message_id, operation_id, topic, payload, created_at,
              attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent
)
SELECT seq, message_id, operation_id, topic, payload, created_at,
       attempts, last_error, last_attempt_at, dead_at, published_at, payload_key, trace_parent
FROM claimed
ORDER BY seq;

-- name: MarkPublished
-- $1 message IDs, $2 now.
UPDATE idem_outbox
SET published_at = coalesce($2::timestamptz, statement_timestamp())
WHERE message_id = ANY ($1::text[]) AND published_at IS NULL;
