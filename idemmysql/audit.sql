-- Named queries of the audit log, the prune runs, the downstream lookups
-- and the pending settlements (migration 003), loaded by internal/sqlfile
-- from audit.go and lookups.go. $1 is "now" as in queries.sql where a
-- query takes it. MySQL has no INSERT … RETURNING: an insert's sequence
-- number is the result's LastInsertId, on the same connection.

-- name: AppendAudit
INSERT INTO idem_audit (at, actor, action, operation_id, detail)
VALUES ($1, $2, $3, $4, $5);

-- name: Now
SELECT coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED));

-- name: AuditLog
SELECT seq, at, actor, action, coalesce(operation_id, ''), detail
FROM idem_audit
WHERE ($1 IS NULL OR operation_id = $1)
  AND ($2 IS NULL OR seq < $2)
ORDER BY seq DESC
LIMIT $3;

-- name: RecordPruneRun
INSERT INTO idem_prune_runs (actor, started_at, finished_at, retired, deleted, error)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: PruneRunsCutoff
-- The seq of the oldest run to keep ($1 = the number kept, > 0).
SELECT seq FROM idem_prune_runs ORDER BY seq DESC LIMIT 1 OFFSET $1;

-- name: TrimPruneRuns
DELETE FROM idem_prune_runs WHERE seq <= $1;

-- name: PruneRuns
SELECT seq, actor, started_at, finished_at, retired, deleted, error
FROM idem_prune_runs
ORDER BY seq DESC
LIMIT $1;

-- name: RecordLookup
INSERT INTO idem_effect_lookups (at, operation_id, effect, downstream_key, answer, handle, detail, actor)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

-- name: Lookups
SELECT seq, operation_id, effect, downstream_key, answer, handle, detail, actor, at
FROM idem_effect_lookups
WHERE operation_id = $1
ORDER BY seq;

-- name: RequestSettlement
-- The first request of an operation stands: a second fails on the
-- primary key (1062), and RequestSettlement reads the first.
INSERT INTO idem_pending_settlements (requested_at, operation_id, outcome, handle, evidence, requested_by)
VALUES (coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)), $2, $3, $4, $5, $6);

-- name: PendingSettlement
SELECT operation_id, outcome, handle, evidence, requested_by, requested_at, coalesce(approved_by, ''), approved_at
FROM idem_pending_settlements
WHERE operation_id = $1;

-- name: ApproveSettlement
-- The compare-and-set of the second operator: once, by someone else.
UPDATE idem_pending_settlements
SET approved_by = $3, approved_at = coalesce($1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
WHERE operation_id = $2 AND approved_by IS NULL AND requested_by <> $3;
