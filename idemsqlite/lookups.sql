-- Named queries of recorded lookups and pending settlements (migration
-- 013), loaded by internal/sqlfile from lookups.go. Conventions as in
-- queries.sql: "now" is one parameter, NULL meaning database time (Unix
-- µs).

-- name: RecordLookup
-- $1 now, $2 operation ID, $3 effect, $4 downstream key, $5 answer, $6
-- handle, $7 detail, $8 actor.
INSERT INTO idem_effect_lookups (at, operation_id, effect, downstream_key, answer, handle, detail, actor)
VALUES (coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)), $2, $3, $4, $5, $6, $7, $8)
RETURNING seq, at;

-- name: Lookups
-- $1 operation ID.
SELECT seq, operation_id, effect, downstream_key, answer, handle, detail, actor, at
FROM idem_effect_lookups
WHERE operation_id = $1
ORDER BY seq;

-- name: RequestSettlement
-- $1 now, $2 operation ID, $3 outcome, $4 handle, $5 evidence, $6
-- requester. Inserts the request, or nothing when the operation has one.
INSERT INTO idem_pending_settlements (requested_at, operation_id, outcome, handle, evidence, requested_by)
VALUES (coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER)), $2, $3, $4, $5, $6)
ON CONFLICT (operation_id) DO NOTHING;

-- name: PendingSettlement
-- $1 operation ID.
SELECT operation_id, outcome, handle, evidence, requested_by, requested_at, coalesce(approved_by, ''), approved_at
FROM idem_pending_settlements
WHERE operation_id = $1;

-- name: ApproveSettlement
-- $1 now, $2 operation ID, $3 approver. The compare-and-set: only an
-- unapproved request, only by someone other than its requester.
UPDATE idem_pending_settlements
SET approved_by = $3, approved_at = coalesce($1, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER))
WHERE operation_id = $2 AND approved_by IS NULL AND requested_by <> $3
RETURNING operation_id, outcome, handle, evidence, requested_by, requested_at, coalesce(approved_by, ''), approved_at;
