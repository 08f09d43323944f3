-- What an operator's decision is checked against (issue 22,
-- registry/lookups.go): every downstream lookup of an effect, by whoever
-- asked, and the settlements that wait for a second operator. Times are
-- Unix µs.
--
-- idem_effect_lookups is append-only: the database refuses every change,
-- and a deletion unless the operation is retired or gone — prune deletes
-- an operation's lookups after its tombstone (retention.sql).
CREATE TABLE idem_effect_lookups (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id   TEXT    NOT NULL CHECK (operation_id <> ''),
    effect         TEXT    NOT NULL CHECK (effect <> ''),
    downstream_key TEXT    NOT NULL CHECK (downstream_key <> ''),
    answer         TEXT    NOT NULL CHECK (answer IN ('executed', 'declined', 'not found', 'not found, voided', 'no answer')),
    handle         TEXT    NOT NULL,
    detail         TEXT    NOT NULL,
    actor          TEXT    NOT NULL CHECK (actor <> ''),
    at             INTEGER NOT NULL
) STRICT;

CREATE INDEX idem_effect_lookups_operation ON idem_effect_lookups (operation_id, seq);

-- idem_pending_settlements: at most one request per operation. Its fields
-- never change; the approver is set once, never to the requester.
CREATE TABLE idem_pending_settlements (
    operation_id TEXT    PRIMARY KEY CHECK (operation_id <> ''),
    outcome      TEXT    NOT NULL CHECK (outcome IN ('succeeded', 'failed')),
    handle       TEXT    NOT NULL,
    evidence     TEXT    NOT NULL CHECK (evidence <> ''),
    requested_by TEXT    NOT NULL CHECK (requested_by <> ''),
    requested_at INTEGER NOT NULL,
    approved_by  TEXT    NULL CHECK (approved_by <> '' AND approved_by <> requested_by),
    approved_at  INTEGER NULL,
    CHECK ((approved_by IS NULL) = (approved_at IS NULL))
) STRICT;

CREATE TRIGGER idem_effect_lookups_no_update BEFORE UPDATE ON idem_effect_lookups
BEGIN
    SELECT RAISE(ABORT, 'idem: idem_effect_lookups is append-only');
END;
CREATE TRIGGER idem_effect_lookups_delete BEFORE DELETE ON idem_effect_lookups
WHEN EXISTS (SELECT 1 FROM idem_operations o WHERE o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: idem_effect_lookups keeps every row of a live operation');
END;
CREATE TRIGGER idem_pending_settlements_update BEFORE UPDATE ON idem_pending_settlements
WHEN NEW.operation_id IS NOT OLD.operation_id OR NEW.outcome IS NOT OLD.outcome OR NEW.handle IS NOT OLD.handle
  OR NEW.evidence IS NOT OLD.evidence OR NEW.requested_by IS NOT OLD.requested_by
  OR NEW.requested_at IS NOT OLD.requested_at OR OLD.approved_by IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'idem: a pending settlement only gets its approver, once');
END;
CREATE TRIGGER idem_pending_settlements_delete BEFORE DELETE ON idem_pending_settlements
WHEN EXISTS (SELECT 1 FROM idem_operations o WHERE o.operation_id = OLD.operation_id AND o.tombstone_until IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'idem: idem_pending_settlements keeps every row of a live operation');
END;
