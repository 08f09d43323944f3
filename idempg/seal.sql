-- Re-sealing stored bodies under the active key (Store.Reseal, migration
-- 010) and counting them by key (Store.KeyUsage).

-- name: ResealResponses
-- $1 the scope to list after, $2 the active key ID, $3 limit. The next
-- terminal records, by scope, whose body is not sealed with the active
-- key, locked until the transaction ends (Prune skips them meanwhile).
SELECT scope, operation_id, resp_key, resp_body, resp_status, resp_media_type, resp_location,
       resp_etag, resp_digest
FROM idem_operations
WHERE scope > $1::bytea AND resp_body IS NOT NULL AND resp_key IS DISTINCT FROM $2::text
ORDER BY scope
LIMIT $3
FOR UPDATE;

-- name: ResealResponse
-- $1 scope, $2 sealed body, $3 its key ID. The migration's guard accepts
-- this change of a terminal record only as a re-seal: a new key, nothing
-- else changed.
UPDATE idem_operations SET resp_body = $2::bytea, resp_key = $3::text
WHERE scope = $1 AND retired_at IS NULL;

-- name: ResealEffects
-- $1, $2 the operation ID and name to list after, $3 the active key ID,
-- $4 limit. The next effect attempts whose request or answer is not sealed
-- with the active key, locked until the transaction ends.
SELECT operation_id, name, request, request_key, answer, answer_key
FROM idem_effects
WHERE (operation_id, name) > ($1::text, $2::text)
  AND ((request IS NOT NULL AND request_key IS DISTINCT FROM $3::text)
       OR (answer IS NOT NULL AND answer_key IS DISTINCT FROM $3::text))
ORDER BY operation_id, name
LIMIT $4
FOR UPDATE;

-- name: ResealEffect
-- $1 operation_id, $2 name, $3 request, $4 its key ID, $5 answer, $6 its
-- key ID (unchanged parts are passed as they are stored).
UPDATE idem_effects SET request = $3::bytea, request_key = $4::text, answer = $5::bytea, answer_key = $6::text
WHERE operation_id = $1 AND name = $2;

-- name: KeyUsage
SELECT coalesce(resp_key, ''), count(*) FROM idem_operations WHERE resp_body IS NOT NULL GROUP BY 1
UNION ALL
SELECT coalesce(request_key, ''), count(*) FROM idem_effects WHERE request IS NOT NULL GROUP BY 1
UNION ALL
SELECT coalesce(answer_key, ''), count(*) FROM idem_effects WHERE answer IS NOT NULL GROUP BY 1;
