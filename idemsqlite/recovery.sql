-- Named queries of recovery (SPEC E3), loaded by internal/sqlfile from
-- recovery.go. Conventions as in queries.sql: $1 is "now" (NULL means
-- database time); times are INTEGER microseconds.

-- name: ExpiredLeaseIDs
-- EXECUTING records only (an effect outside the database may have begun):
-- an expired RESERVED record is continued by the client's retry
-- (registry.LeaseScanner). The redundant IN keeps the partial index usable.
-- $1 now, $2 limit. The literal states match the partial index
-- idem_operations_lease (migration 001). A plain read: the caller's
-- TakeOver (compare-and-set) decides which worker gets each record.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
SELECT o.operation_id
FROM idem_operations AS o, clock AS c
WHERE o.state IN ('RESERVED', 'EXECUTING') AND o.state = 'EXECUTING' AND o.lease_until <= c.now
  AND o.retired_at IS NULL
ORDER BY o.lease_until, o.operation_id
LIMIT $2;

-- name: ExtendLease
-- The lease heartbeat: $1 now, $2 scope, $3 operation_id, $4 owner_gen,
-- $5 lease µs. Fenced like every change; no row means ErrFenced.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_operations
SET lease_until = clock.now + $5, updated_at = clock.now
FROM clock
WHERE scope = $2 AND operation_id = $3 AND owner_gen = $4 AND state IN ('RESERVED', 'EXECUTING')
  AND retired_at IS NULL
RETURNING lease_until;
