-- Named queries of the control row (migration 003), loaded by
-- internal/sqlfile from control.go. $1 is "now" as in queries.sql: NULL
-- means database time.

-- name: ControlGet
SELECT writer_epoch, draining, updated_at FROM idem_control WHERE id = 1;

-- name: ControlEpoch
SELECT writer_epoch FROM idem_control WHERE id = 1;

-- name: ControlBumpEpoch
-- Run in a write transaction: SQLite's single writer makes the increment
-- atomic, so concurrent bumps each return a distinct epoch.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_control
SET writer_epoch = writer_epoch + 1, updated_at = clock.now
FROM clock
WHERE id = 1
RETURNING writer_epoch;

-- name: ControlSetDraining
-- $2 is 0 or 1.
WITH clock(now) AS (SELECT coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
UPDATE idem_control
SET draining = $2, updated_at = clock.now
FROM clock
WHERE id = 1;
