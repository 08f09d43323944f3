-- Named queries of the rollouts and their verdict counts (migration 018),
-- loaded by internal/sqlfile from rollout.go. Conventions as in
-- queries.sql: "now" is one parameter, NULL meaning database time.

-- name: Rollouts
SELECT operation, coalesce(mode, ''), percent, by_principal, allow_tenants, deny_tenants,
       forced, enforced_at, version, updated_at, updated_by
FROM idem_rollouts
ORDER BY operation COLLATE "C";

-- name: Rollout
-- $1 operation.
SELECT operation, coalesce(mode, ''), percent, by_principal, allow_tenants, deny_tenants,
       forced, enforced_at, version, updated_at, updated_by
FROM idem_rollouts
WHERE operation = $1;

-- name: RolloutForUpdate
-- $1 operation. SetRollout's read: the row locked until its transaction
-- ends, so no other change slips between the checks and the write.
SELECT operation, coalesce(mode, ''), percent, by_principal, allow_tenants, deny_tenants,
       forced, enforced_at, version, updated_at, updated_by
FROM idem_rollouts
WHERE operation = $1
FOR UPDATE;

-- name: RolloutInsert
-- The compare-and-set of a change to an operation with no row (Seen 0):
-- no row inserted means another change got there first.
-- $1 now, $2 operation, $3 mode, $4 percent, $5 by_principal, $6 allow,
-- $7 deny, $8 forced, $9 enforcing (set enforced_at), $10 actor, $11 the
-- version seen (0).
INSERT INTO idem_rollouts (operation, mode, percent, by_principal, allow_tenants, deny_tenants,
                           forced, enforced_at, version, updated_at, updated_by)
SELECT $2, $3, $4, $5, $6, $7, $8,
       CASE WHEN $9::boolean THEN coalesce($1::timestamptz, statement_timestamp()) END,
       1, coalesce($1::timestamptz, statement_timestamp()), $10
WHERE $11::bigint = 0
ON CONFLICT (operation) DO NOTHING
RETURNING enforced_at, version, updated_at;

-- name: RolloutUpdate
-- The compare-and-set of a change to an existing row: it matches only
-- the version the operator saw ($11). Parameters as RolloutInsert.
UPDATE idem_rollouts
SET mode = $3, percent = $4, by_principal = $5, allow_tenants = $6, deny_tenants = $7,
    forced = $8,
    enforced_at = coalesce(enforced_at, CASE WHEN $9::boolean THEN coalesce($1::timestamptz, statement_timestamp()) END),
    version = version + 1, updated_at = coalesce($1::timestamptz, statement_timestamp()), updated_by = $10
WHERE operation = $2 AND version = $11::bigint
RETURNING enforced_at, version, updated_at;

-- name: RolloutMarkEnforced
-- $1 now, $2 operation. Creates the row (mode NULL) or sets enforced_at
-- when unset, raising the version; a row already enforced is left as it
-- is, and so is one an operator set off without force (no instance that
-- follows the row enforces it; the CHECK would refuse the change).
INSERT INTO idem_rollouts AS r (operation, mode, enforced_at, version, updated_at, updated_by)
VALUES ($2, NULL, coalesce($1::timestamptz, statement_timestamp()), 1, coalesce($1::timestamptz, statement_timestamp()), '')
ON CONFLICT (operation) DO UPDATE
SET enforced_at = excluded.enforced_at, version = r.version + 1,
    updated_at = excluded.updated_at, updated_by = ''
WHERE r.enforced_at IS NULL
  AND (r.mode IS DISTINCT FROM 'off' OR r.forced);

-- name: AddVerdict
-- $1 now, $2 operation, $3 tenant, $4 mode, $5 verdict, $6 count to add.
INSERT INTO idem_rollout_verdicts AS v (operation, tenant, mode, verdict, n, updated_at)
VALUES ($2, $3, $4, $5, $6, coalesce($1::timestamptz, statement_timestamp()))
ON CONFLICT (operation, tenant, mode, verdict) DO UPDATE
SET n = v.n + excluded.n, updated_at = excluded.updated_at;

-- name: Verdicts
-- $1 operation.
SELECT operation, tenant, mode, verdict, n, updated_at
FROM idem_rollout_verdicts
WHERE operation = $1
ORDER BY tenant COLLATE "C", mode COLLATE "C", verdict COLLATE "C";
