-- Named queries of the control row (migration 003), loaded by
-- internal/sqlfile from control.go. "now" is as in queries.sql: NULL means
-- database time.

-- name: ControlGet
SELECT writer_epoch, draining, updated_at FROM idem_control WHERE id = 1;

-- name: ControlEpoch
SELECT writer_epoch FROM idem_control WHERE id = 1;

-- name: ControlBumpEpoch
-- $1 now. One statement: under concurrent bumps each waits for the row
-- lock of the previous one and then adds one to the committed value, so
-- every bump returns a distinct epoch.
UPDATE idem_control
SET writer_epoch = writer_epoch + 1, updated_at = coalesce($1::timestamptz, statement_timestamp())
WHERE id = 1
RETURNING writer_epoch;

-- name: ControlSetDraining
-- $1 now, $2 draining.
UPDATE idem_control
SET draining = $2::boolean, updated_at = coalesce($1::timestamptz, statement_timestamp())
WHERE id = 1;
