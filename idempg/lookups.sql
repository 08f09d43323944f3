-- Named queries of recorded lookups and pending settlements (migration
-- 017), loaded by internal/sqlfile from lookups.go. Conventions as in
-- queries.sql: "now" is one parameter, NULL meaning database time.

-- name: RecordLookup
-- $1 operation ID, $2 effect, $3 downstream key, $4 answer, $5 handle,
-- $6 detail, $7 actor, $8 now.
INSERT INTO idem_effect_lookups (operation_id, effect, downstream_key, answer, handle, detail, actor, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, statement_timestamp()))
RETURNING seq, at;

-- name: Lookups
-- $1 operation ID.
SELECT seq, operation_id, effect, downstream_key, answer, handle, detail, actor, at
FROM idem_effect_lookups
WHERE operation_id = $1
ORDER BY seq;

-- name: RequestSettlement
-- $1 operation ID, $2 outcome, $3 handle, $4 evidence, $5 requester, $6
-- now. Inserts the request, or nothing when the operation has one; then
-- the row as stored, and whether this statement inserted it.
WITH added AS (
    INSERT INTO idem_pending_settlements (operation_id, outcome, handle, evidence, requested_by, requested_at)
    VALUES ($1, $2, $3, $4, $5, coalesce($6::timestamptz, statement_timestamp()))
    ON CONFLICT (operation_id) DO NOTHING
    RETURNING operation_id, outcome, handle, evidence, requested_by, requested_at, approved_by, approved_at
)
SELECT operation_id, outcome, handle, evidence, requested_by, requested_at, coalesce(approved_by, ''), approved_at, true FROM added
UNION ALL
SELECT operation_id, outcome, handle, evidence, requested_by, requested_at, coalesce(approved_by, ''), approved_at, false
FROM idem_pending_settlements WHERE operation_id = $1 AND NOT EXISTS (SELECT 1 FROM added);

-- name: PendingSettlement
-- $1 operation ID.
SELECT operation_id, outcome, handle, evidence, requested_by, requested_at, coalesce(approved_by, ''), approved_at, false
FROM idem_pending_settlements
WHERE operation_id = $1;

-- name: ApproveSettlement
-- $1 operation ID, $2 approver, $3 now. The compare-and-set: only an
-- unapproved request, only by someone other than its requester.
UPDATE idem_pending_settlements
SET approved_by = $2, approved_at = coalesce($3::timestamptz, statement_timestamp())
WHERE operation_id = $1 AND approved_by IS NULL AND requested_by <> $2
RETURNING operation_id, outcome, handle, evidence, requested_by, requested_at, coalesce(approved_by, ''), approved_at, false;
