-- Named queries of the rollouts and their verdict counts (migration 014),
-- loaded by internal/sqlfile from rollout.go. Conventions as in
-- queries.sql: "now" is one parameter, NULL meaning database time (Unix
-- µs). Every write runs in a write transaction (BEGIN IMMEDIATE), so a
-- read in it sees the row no other writer can change before the commit.

-- name: Rollouts
SELECT operation, coalesce(mode, ''), percent, by_principal, allow_tenants, deny_tenants,
       forced, enforced_at, version, updated_at, updated_by
FROM idem_rollouts
ORDER BY operation;

-- name: Rollout
-- $1 operation.
SELECT operation, coalesce(mode, ''), percent, by_principal, allow_tenants, deny_tenants,
       forced, enforced_at, version, updated_at, updated_by
FROM idem_rollouts
WHERE operation = $1;

-- name: RolloutInsert
-- The compare-and-set of a change to an operation with no row (Seen 0):
-- no row inserted means another change got there first.
-- $1 now, $2 operation, $3 mode, $4 percent, $5 by_principal, $6 allow,
-- $7 deny, $8 forced, $9 enforcing (1: set enforced_at), $10 actor,
-- $11 the version seen (0).
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_rollouts (operation, mode, percent, by_principal, allow_tenants, deny_tenants,
                           forced, enforced_at, version, updated_at, updated_by)
SELECT $2, $3, $4, $5, $6, $7, $8, CASE WHEN $9 THEN clock.now END, 1, clock.now, $10
FROM clock WHERE $11 = 0
ON CONFLICT (operation) DO NOTHING
RETURNING enforced_at, version, updated_at;

-- name: RolloutUpdate
-- The compare-and-set of a change to an existing row: it matches only
-- the version the operator saw ($11). Parameters as RolloutInsert.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_rollouts
SET mode = $3, percent = $4, by_principal = $5, allow_tenants = $6, deny_tenants = $7,
    forced = $8, enforced_at = coalesce(enforced_at, CASE WHEN $9 THEN clock.now END),
    version = version + 1, updated_at = clock.now, updated_by = $10
FROM clock
WHERE operation = $2 AND version = $11
RETURNING enforced_at, version, updated_at;

-- name: RolloutMarkEnforced
-- $1 now, $2 operation. Creates the row (mode NULL) or sets enforced_at
-- when unset, raising the version; a row already enforced is left as it
-- is, and so is one an operator set off without force (no instance that
-- follows the row enforces it; the CHECK would refuse the change).
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_rollouts (operation, mode, enforced_at, version, updated_at, updated_by)
SELECT $2, NULL, clock.now, 1, clock.now, '' FROM clock WHERE true
ON CONFLICT (operation) DO UPDATE
SET enforced_at = excluded.enforced_at, version = idem_rollouts.version + 1,
    updated_at = excluded.updated_at, updated_by = ''
WHERE idem_rollouts.enforced_at IS NULL
  AND (idem_rollouts.mode IS NOT 'off' OR idem_rollouts.forced = 1);

-- name: AddVerdict
-- $1 now, $2 operation, $3 tenant, $4 mode, $5 verdict, $6 count to add.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_rollout_verdicts (operation, tenant, mode, verdict, n, updated_at)
SELECT $2, $3, $4, $5, $6, clock.now FROM clock WHERE true
ON CONFLICT (operation, tenant, mode, verdict) DO UPDATE
SET n = idem_rollout_verdicts.n + excluded.n, updated_at = excluded.updated_at;

-- name: Verdicts
-- $1 operation.
SELECT operation, tenant, mode, verdict, n, updated_at
FROM idem_rollout_verdicts
WHERE operation = $1
ORDER BY tenant, mode, verdict; -- (BINARY collation, as in idempg)
