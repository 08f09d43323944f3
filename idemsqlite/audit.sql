-- Named queries of the audit log and the prune runs (migration 010),
-- loaded by internal/sqlfile from audit.go. Conventions as in
-- queries.sql: "now" is one parameter, NULL meaning database time (Unix
-- µs).

-- name: AppendAudit
-- $1 now, $2 actor, $3 action, $4 operation ID (NULL: none), $5 detail.
INSERT INTO idem_audit (at, actor, action, operation_id, detail)
VALUES (coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)), $2, $3, $4, $5)
RETURNING seq, at;

-- name: AuditLog
-- $1 operation ID (NULL: every entry), $2 list below this seq (NULL: from
-- the newest), $3 limit.
SELECT seq, at, actor, action, coalesce(operation_id, ''), detail
FROM idem_audit
WHERE ($1 IS NULL OR operation_id = $1)
  AND ($2 IS NULL OR seq < $2)
ORDER BY seq DESC
LIMIT $3;

-- name: RecordPruneRun
-- $1 actor, $2 started µs, $3 finished µs, $4 retired, $5 deleted, $6 error.
INSERT INTO idem_prune_runs (actor, started_at, finished_at, retired, deleted, error)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: TrimPruneRuns
-- $1 runs to keep: deletes every run but the newest $1, in RecordPruneRun's
-- transaction.
DELETE FROM idem_prune_runs
WHERE seq NOT IN (SELECT seq FROM idem_prune_runs ORDER BY seq DESC LIMIT $1);

-- name: PruneRuns
-- $1 limit.
SELECT seq, actor, started_at, finished_at, retired, deleted, error
FROM idem_prune_runs
ORDER BY seq DESC
LIMIT $1;
