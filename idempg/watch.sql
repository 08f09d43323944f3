-- Named statements of Store.Watch (watch.go), loaded by internal/sqlfile.
-- The table is idem_waiters (migration 012).

-- name: Listen
LISTEN idem_changed;

-- name: InsertWaiter
-- $1 scope, $2 waiter, $3 lifetime µs. Database time, never Options.Now:
-- the expiry bounds the rows of a crashed process in real time. Deletes
-- every expired row first (the rows of watchers that crashed; the table is
-- tiny, so the scan is too) — the only cleanup the table needs.
WITH gone AS (
    DELETE FROM idem_waiters WHERE expires_at < statement_timestamp()
)
INSERT INTO idem_waiters (scope, waiter, expires_at)
VALUES ($1::bytea, $2::text, statement_timestamp() + $3::bigint * interval '1 microsecond')
ON CONFLICT (scope, waiter) DO UPDATE SET expires_at = EXCLUDED.expires_at;

-- name: DeleteWaiter
-- $1 scope, $2 waiter.
DELETE FROM idem_waiters WHERE scope = $1::bytea AND waiter = $2::text;
