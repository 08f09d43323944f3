-- Named queries of the key roster (migration 012), loaded by
-- internal/sqlfile from keyroster.go. "now" is as in queries.sql: NULL
-- means database time (µs since the epoch).

-- name: AnnounceKeys
-- $1 instance, $2 key IDs (space separated, sorted), $3 now.
INSERT INTO idem_key_holders (instance, key_ids, seen_at)
VALUES ($1, $2, coalesce($3, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)))
ON CONFLICT (instance) DO UPDATE SET key_ids = excluded.key_ids, seen_at = excluded.seen_at;

-- name: KeyHolders
-- $1 window µs, $2 now.
SELECT instance, key_ids, seen_at FROM idem_key_holders
WHERE seen_at >= coalesce($2, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)) - $1
ORDER BY instance;

-- name: ForgetInstance
-- $1 instance.
DELETE FROM idem_key_holders WHERE instance = $1;
