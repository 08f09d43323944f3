-- Named queries of the shard directory (migration 019), loaded by
-- internal/sqlfile from shard.go. "now" is one parameter, NULL meaning
-- database time.

-- name: ShardLookup
-- $1 tenant. One row when the directory has a default: the tenant's
-- entry, or the default with version 0 when it has none.
SELECT coalesce(e.shard, d.shard), coalesce(e.draining, false), coalesce(e.version, 0),
       e.updated_at, coalesce(e.updated_by, '')
FROM idem_shard_default d
LEFT JOIN idem_shard_directory e ON e.tenant = $1;

-- name: ShardList
SELECT tenant, shard, draining, version, updated_at, updated_by
FROM idem_shard_directory
ORDER BY tenant COLLATE "C";

-- name: ShardDefault
SELECT shard FROM idem_shard_default;

-- name: ShardInitDefault
-- $1 now, $2 shard, $3 actor. Sets the default if there is none and
-- returns the default in place either way.
WITH ins AS (
    INSERT INTO idem_shard_default (one, shard, updated_at, updated_by)
    VALUES (true, $2, coalesce($1::timestamptz, statement_timestamp()), $3)
    ON CONFLICT (one) DO NOTHING
    RETURNING shard
)
SELECT shard FROM ins
UNION ALL
SELECT shard FROM idem_shard_default WHERE NOT EXISTS (SELECT 1 FROM ins);

-- name: ShardInsert
-- The compare-and-set of an entry for a tenant without one (seen 0):
-- no row means another change got there first.
-- $1 now, $2 tenant, $3 shard, $4 draining, $5 actor.
INSERT INTO idem_shard_directory (tenant, shard, draining, version, updated_at, updated_by)
VALUES ($2, $3, $4, 1, coalesce($1::timestamptz, statement_timestamp()), $5)
ON CONFLICT (tenant) DO NOTHING
RETURNING version, updated_at;

-- name: ShardUpdate
-- The compare-and-set of a change to an entry at version $6: no row
-- means the entry changed (or vanished) since it was read.
-- $1 now, $2 tenant, $3 shard, $4 draining, $5 actor, $6 seen.
UPDATE idem_shard_directory
SET shard = $3, draining = $4, version = version + 1,
    updated_at = coalesce($1::timestamptz, statement_timestamp()), updated_by = $5
WHERE tenant = $2 AND version = $6
RETURNING version, updated_at;
