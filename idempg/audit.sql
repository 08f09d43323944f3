-- Named queries of the audit log and the prune runs (migration 014),
-- loaded by internal/sqlfile from audit.go. Conventions as in
-- queries.sql: "now" is one parameter, NULL meaning database time.

-- name: AppendAudit
-- $1 actor, $2 action, $3 operation ID (NULL: none), $4 detail, $5 now.
INSERT INTO idem_audit (at, actor, action, operation_id, detail)
VALUES (coalesce($5::timestamptz, statement_timestamp()), $1, $2, $3, $4)
RETURNING seq, at;

-- name: AuditLog
-- $1 operation ID (NULL: every entry), $2 list below this seq (NULL: from
-- the newest), $3 limit.
SELECT seq, at, actor, action, coalesce(operation_id, ''), detail
FROM idem_audit
WHERE ($1::text IS NULL OR operation_id = $1::text)
  AND ($2::bigint IS NULL OR seq < $2::bigint)
ORDER BY seq DESC
LIMIT $3;

-- name: RecordPruneRun
-- $1 actor, $2 started, $3 finished, $4 retired, $5 deleted, $6 error,
-- $7 runs to keep. One statement: the insert, and the deletion of every
-- run but the newest $7 - 1 it saw (the new one, which the deletion does
-- not see, makes $7).
WITH added AS (
    INSERT INTO idem_prune_runs (actor, started_at, finished_at, retired, deleted, error)
    VALUES ($1, $2, $3, $4, $5, $6)
)
DELETE FROM idem_prune_runs
WHERE seq NOT IN (SELECT seq FROM idem_prune_runs ORDER BY seq DESC LIMIT $7::bigint - 1);

-- name: PruneRuns
-- $1 limit.
SELECT seq, actor, started_at, finished_at, retired, deleted, error
FROM idem_prune_runs
ORDER BY seq DESC
LIMIT $1;
