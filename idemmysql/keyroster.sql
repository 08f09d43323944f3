-- Named queries of the key roster (migration 004), loaded by
-- internal/sqlfile from keyroster.go.

-- name: AnnounceKeys
INSERT INTO idem_key_holders (instance, key_ids, seen_at)
VALUES ($1, $2, coalesce($3, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))
ON DUPLICATE KEY UPDATE key_ids = VALUES(key_ids), seen_at = VALUES(seen_at);

-- name: KeyHolders
SELECT instance, key_ids, seen_at FROM idem_key_holders
WHERE seen_at >= coalesce($2, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)) - $1
ORDER BY instance;

-- name: ForgetInstance
DELETE FROM idem_key_holders WHERE instance = $1;
