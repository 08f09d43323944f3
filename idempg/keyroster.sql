-- Named queries of the key roster (migration 016), loaded by
-- internal/sqlfile from keyroster.go. "now" is as in queries.sql: NULL
-- means database time.

-- name: AnnounceKeys
-- $1 instance, $2 key IDs (space separated, sorted), $3 now.
INSERT INTO idem_key_holders (instance, key_ids, seen_at)
VALUES ($1, $2, coalesce($3::timestamptz, statement_timestamp()))
ON CONFLICT (instance) DO UPDATE SET key_ids = EXCLUDED.key_ids, seen_at = EXCLUDED.seen_at;

-- name: KeyHolders
-- $1 window µs, $2 now.
SELECT instance, key_ids, seen_at FROM idem_key_holders
WHERE seen_at >= coalesce($2::timestamptz, statement_timestamp()) - $1::bigint * interval '1 microsecond'
ORDER BY instance;

-- name: ForgetInstance
-- $1 instance.
DELETE FROM idem_key_holders WHERE instance = $1;
