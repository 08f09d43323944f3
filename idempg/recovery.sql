-- Named queries of recovery (SPEC E3), loaded by internal/sqlfile from
-- recovery.go. Conventions as in queries.sql: "now" is one parameter, NULL
-- meaning database time, read once per statement.

-- name: ExpiredLeaseIDs
-- EXECUTING records only (an effect outside the database may have begun):
-- an expired RESERVED record is continued by the client's retry
-- (registry.LeaseScanner). The redundant IN keeps the partial index usable.
-- $1 now, $2 limit. The literal states match the partial index
-- idem_operations_lease (migration 001), which serves the range scan on
-- lease_until under a generic plan too. A plain read: the caller's
-- TakeOver (compare-and-set) decides which worker gets each record.
WITH clock AS (SELECT coalesce($1::timestamptz, statement_timestamp()) AS t)
SELECT o.operation_id
FROM idem_operations o, clock
WHERE o.state IN ('RESERVED', 'EXECUTING') AND o.state = 'EXECUTING' AND o.lease_until <= clock.t
  AND o.retired_at IS NULL
ORDER BY o.lease_until, o.operation_id
LIMIT $2;

-- name: ExtendLease
-- The lease heartbeat: $1 scope, $2 operation_id, $3 owner_gen, $4 lease
-- µs, $5 now. Fenced like every change; no row means ErrFenced.
WITH clock AS (SELECT coalesce($5::timestamptz, statement_timestamp()) AS t)
UPDATE idem_operations o
SET lease_until = clock.t + $4::bigint * interval '1 microsecond', updated_at = clock.t
FROM clock
WHERE o.scope = $1 AND o.operation_id = $2 AND o.owner_gen = $3
  AND o.state IN ('RESERVED', 'EXECUTING') AND o.retired_at IS NULL
RETURNING o.lease_until;
