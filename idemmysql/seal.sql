-- Named queries of re-sealing (registry.Resealer), loaded by
-- internal/sqlfile from seal.go.

-- name: ResealResponses
-- Stored responses not under the active key ($2), after the cursor's
-- scope ($1), in scope order.
SELECT scope, operation_id, resp_key, resp_body, resp_status, resp_media_type, resp_location,
       resp_etag, resp_digest
FROM idem_operations
WHERE scope > coalesce($1, x'') AND resp_body IS NOT NULL AND NOT (resp_key <=> $2)
ORDER BY scope
LIMIT $3
FOR UPDATE;

-- name: ResealResponse
-- A re-seal: same response, new body and key (the trigger allows
-- nothing else on a terminal record).
UPDATE idem_operations SET resp_body = $2, resp_key = $3
WHERE scope = $1 AND retired_at IS NULL;

-- name: ResealEffects
SELECT operation_id, name, request, request_key, answer, answer_key
FROM idem_effects
WHERE (operation_id, name) > (coalesce($1, ''), coalesce($2, ''))
  AND ((request IS NOT NULL AND NOT (request_key <=> $3))
       OR (answer IS NOT NULL AND NOT (answer_key <=> $3)))
ORDER BY operation_id, name
LIMIT $4
FOR UPDATE;

-- name: ResealEffect
UPDATE idem_effects SET request = $3, request_key = $4, answer = $5, answer_key = $6
WHERE operation_id = $1 AND name = $2;

-- name: KeyUsage
SELECT coalesce(resp_key, ''), count(*) FROM idem_operations WHERE resp_body IS NOT NULL GROUP BY 1
UNION ALL
SELECT coalesce(request_key, ''), count(*) FROM idem_effects WHERE request IS NOT NULL GROUP BY 1
UNION ALL
SELECT coalesce(answer_key, ''), count(*) FROM idem_effects WHERE answer IS NOT NULL GROUP BY 1;
