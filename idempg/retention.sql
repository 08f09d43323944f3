-- Named queries of retention (SPEC E5, migration 004), loaded by
-- internal/sqlfile from retention.go. Conventions as in queries.sql: "now"
-- is one parameter, NULL meaning database time, read once per statement.

-- name: Prune
-- $1 limit, $2 now. One statement, so one transaction and one instant.
-- due: up to $1 terminal records not yet retired whose expiry has come,
-- oldest expiry first; doomed: up to $1 tombstones whose deletion time has
-- come. Both lock their rows FOR UPDATE SKIP LOCKED, so concurrent prunes
-- take disjoint rows and never wait for each other; a row another
-- transaction changed meanwhile is re-checked after the lock (READ
-- COMMITTED), so a record is retired once and deleted once. The two sets
-- are disjoint (doomed rows are tombstones, due rows are not), so a record
-- retired here is not deleted in the same call. abandoned: up to $1
-- abandoned reservations (migration 015), retired the same way with their
-- state kept; disjoint from due (not terminal) and doomed (not retired). The transition trigger
-- (migration 004) checks that retirement drops the whole response and
-- changes nothing else; the delete trigger that only tombstones with a
-- deletion time go. With a deleted tombstone go its published outbox
-- messages (unpublished ones stay for the relay, which does not need the
-- record), its effect attempts and reconciliation log (migration 005), and
-- its recorded lookups and pending settlement (migration 017), and its
-- recovery attempts (migration 024).
WITH clock AS (SELECT coalesce($2::timestamptz, statement_timestamp()) AS t),
due AS (
    SELECT o.scope
    FROM idem_operations o, clock
    WHERE o.retired_at IS NULL AND o.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
      AND o.expires_at <= clock.t
    ORDER BY o.expires_at
    LIMIT $1
    FOR UPDATE OF o SKIP LOCKED
),
retired AS (
    UPDATE idem_operations o
    SET retired_at = clock.t,
        tombstone_until = clock.t + o.tombstone_ttl * interval '1 microsecond',
        resp_status = NULL, resp_media_type = NULL, resp_location = NULL,
        resp_etag = NULL, resp_body = NULL, resp_digest = NULL, resp_key = NULL,
        updated_at = clock.t
    FROM clock, due
    WHERE o.scope = due.scope AND o.retired_at IS NULL
    RETURNING o.scope
),
abandoned AS (
    -- Abandoned reservations (migration 015): RESERVED or EXECUTING, no
    -- effect attempt, lease expired a full retention (expires_at -
    -- created_at, unchanged until settlement) ago. Found through
    -- idem_operations_lease; locked like due, and re-checked by the
    -- UPDATE after the lock, so a takeover that moved the lease first
    -- wins and the record stays.
    SELECT o.scope
    FROM idem_operations o, clock
    WHERE o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL
      AND o.lease_until <= clock.t AND o.lease_until + (o.expires_at - o.created_at) <= clock.t
      AND NOT EXISTS (SELECT 1 FROM idem_effects x WHERE x.operation_id = o.operation_id)
    ORDER BY o.lease_until
    LIMIT $1
    FOR UPDATE OF o SKIP LOCKED
),
abandoned_retired AS (
    UPDATE idem_operations o
    SET retired_at = clock.t,
        tombstone_until = clock.t + o.tombstone_ttl * interval '1 microsecond',
        updated_at = clock.t
    FROM clock, abandoned
    WHERE o.scope = abandoned.scope AND o.retired_at IS NULL
      AND o.state IN ('RESERVED', 'EXECUTING')
      AND o.lease_until + (o.expires_at - o.created_at) <= clock.t
    RETURNING o.scope
),
doomed AS (
    SELECT o.scope, o.operation_id
    FROM idem_operations o, clock
    WHERE o.tombstone_until IS NOT NULL AND o.tombstone_until <= clock.t
    ORDER BY o.tombstone_until
    LIMIT $1
    FOR UPDATE OF o SKIP LOCKED
),
outbox AS (
    DELETE FROM idem_outbox b USING doomed
    WHERE b.operation_id = doomed.operation_id AND b.published_at IS NOT NULL
),
effects AS (
    DELETE FROM idem_effects x USING doomed WHERE x.operation_id = doomed.operation_id
),
reconciliations AS (
    DELETE FROM idem_reconciliations x USING doomed WHERE x.operation_id = doomed.operation_id
),
lookups AS (
    DELETE FROM idem_effect_lookups x USING doomed WHERE x.operation_id = doomed.operation_id
),
pending AS (
    DELETE FROM idem_pending_settlements x USING doomed WHERE x.operation_id = doomed.operation_id
),
attempts AS (
    -- The recovery worker's last failed attempt (migration 024), left
    -- when the worker that wrote it stopped before the operation was
    -- settled.
    DELETE FROM idem_recovery_attempts x USING doomed WHERE x.operation_id = doomed.operation_id
),
deleted AS (
    DELETE FROM idem_operations o USING doomed
    WHERE o.scope = doomed.scope AND o.tombstone_until IS NOT NULL
    RETURNING o.scope
)
SELECT (SELECT count(*) FROM retired) + (SELECT count(*) FROM abandoned_retired), (SELECT count(*) FROM deleted);
