-- Named queries of rollouts (migration 005), loaded by internal/sqlfile
-- from rollout.go. $1 is "now" as in queries.sql.

-- name: Rollouts
SELECT operation, coalesce(mode, ''), percent, by_principal, allow_tenants, deny_tenants,
       forced, enforced_at, version, updated_at, updated_by
FROM idem_rollouts
ORDER BY operation;

-- name: Rollout
SELECT operation, coalesce(mode, ''), percent, by_principal, allow_tenants, deny_tenants,
       forced, enforced_at, version, updated_at, updated_by
FROM idem_rollouts
WHERE operation = $1;

-- name: RolloutInsert
-- The first change of an operation (version 1); a concurrent first change
-- fails on the primary key (1062): the caller's view is stale.
INSERT INTO idem_rollouts (operation, mode, percent, by_principal, allow_tenants, deny_tenants,
                           forced, enforced_at, version, updated_at, updated_by)
VALUES ($2, $3, $4, $5, $6, $7, $8,
        CASE WHEN $9 = 1 THEN coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) END, 1,
        coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), $10);

-- name: RolloutUpdate
-- The compare-and-set on the version the caller saw ($11).
UPDATE idem_rollouts
SET mode = $3, percent = $4, by_principal = $5, allow_tenants = $6, deny_tenants = $7,
    forced = $8,
    enforced_at = coalesce(enforced_at, CASE WHEN $9 = 1 THEN coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) END),
    version = version + 1, updated_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), updated_by = $10
WHERE operation = $2 AND version = $11;

-- name: RolloutMarkEnforced
-- Sets enforced_at once, for an operation not (forced) off; the row is
-- created for an operation that has none. MySQL evaluates the SET list of
-- ON DUPLICATE KEY UPDATE left to right, so the condition is read on the
-- old enforced_at by every column before enforced_at itself changes.
INSERT INTO idem_rollouts (operation, mode, enforced_at, version, updated_at, updated_by)
VALUES ($2, NULL, coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), 1,
        coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), '')
ON DUPLICATE KEY UPDATE
    version = IF(enforced_at IS NULL AND (NOT (mode <=> 'off') OR forced = 1), version + 1, version),
    updated_by = IF(enforced_at IS NULL AND (NOT (mode <=> 'off') OR forced = 1), '', updated_by),
    updated_at = IF(enforced_at IS NULL AND (NOT (mode <=> 'off') OR forced = 1), VALUES(updated_at), updated_at),
    enforced_at = IF(enforced_at IS NULL AND (NOT (mode <=> 'off') OR forced = 1), VALUES(enforced_at), enforced_at);

-- name: AddVerdict
INSERT INTO idem_rollout_verdicts (operation, tenant, mode, verdict, n, updated_at)
VALUES ($2, $3, $4, $5, $6, coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))
ON DUPLICATE KEY UPDATE n = n + VALUES(n), updated_at = VALUES(updated_at);

-- name: Verdicts
SELECT operation, tenant, mode, verdict, n, updated_at
FROM idem_rollout_verdicts
WHERE operation = $1
ORDER BY tenant, mode, verdict;
