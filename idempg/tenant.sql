-- Named queries of the tenant fence and counts (migration 020,
-- registry/tenant.go), loaded by internal/sqlfile from tenant.go. "now"
-- is as in queries.sql: NULL means database time.

-- name: FenceTenant
-- $1 tenant hash, $2 moved to, $3 now. Idempotent: a second fence keeps
-- its first time and takes the new destination.
INSERT INTO idem_tenant_fences (tenant_hash, moved_to, fenced_at)
VALUES ($1::bytea, $2::text, coalesce($3::timestamptz, statement_timestamp()))
ON CONFLICT (tenant_hash) DO UPDATE SET moved_to = EXCLUDED.moved_to;

-- name: UnfenceTenant
-- $1 tenant hash.
DELETE FROM idem_tenant_fences WHERE tenant_hash = $1::bytea;

-- name: TenantFenced
-- $1 tenant hash.
SELECT EXISTS (SELECT 1 FROM idem_tenant_fences WHERE tenant_hash = $1::bytea);

-- name: TenantInFlight
-- $1 tenant hash, $2 now. One snapshot: the tenant's records (through
-- idem_operations_tenant), those in flight with a live lease, its UNKNOWN
-- ones and its tombstones, and the unattributed records of the registry.
WITH clock AS (SELECT coalesce($2::timestamptz, statement_timestamp()) AS t)
SELECT count(*),
       count(*) FILTER (WHERE o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL AND o.lease_until > clock.t),
       count(*) FILTER (WHERE o.state = 'UNKNOWN'),
       count(*) FILTER (WHERE o.retired_at IS NOT NULL),
       (SELECT count(*) FROM idem_operations WHERE tenant_hash IS NULL)
FROM clock JOIN idem_operations o ON o.tenant_hash = $1::bytea;
