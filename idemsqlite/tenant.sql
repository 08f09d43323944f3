-- Named queries of the tenant fence and counts (migration 015,
-- registry/tenant.go), loaded by internal/sqlfile from tenant.go. $1 is
-- "now" as in queries.sql (NULL: database time).

-- name: FenceTenant
-- $2 tenant hash, $3 moved to. Idempotent: a second fence keeps its first
-- time and takes the new destination.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
INSERT INTO idem_tenant_fences (tenant_hash, moved_to, fenced_at)
SELECT $2, $3, now FROM clock WHERE true
ON CONFLICT (tenant_hash) DO UPDATE SET moved_to = excluded.moved_to;

-- name: UnfenceTenant
-- $1 tenant hash.
DELETE FROM idem_tenant_fences WHERE tenant_hash = $1;

-- name: TenantFenced
-- $1 tenant hash.
SELECT EXISTS (SELECT 1 FROM idem_tenant_fences WHERE tenant_hash = $1);

-- name: TenantInFlight
-- $2 tenant hash. One snapshot: the tenant's records (through
-- idem_operations_tenant), those in flight with a live lease, its UNKNOWN
-- ones and its tombstones, and the unattributed records of the registry.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
SELECT count(*),
       coalesce(sum(o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL AND o.lease_until > clock.now), 0),
       coalesce(sum(o.state = 'UNKNOWN'), 0),
       coalesce(sum(o.retired_at IS NOT NULL), 0),
       (SELECT count(*) FROM idem_operations WHERE tenant_hash IS NULL)
FROM clock JOIN idem_operations o ON o.tenant_hash = $2;
