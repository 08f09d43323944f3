-- The registry's control row (SPEC E6): the writer epoch that fences older
-- writers and the drain flag (0 or 1). Exactly one row, id 1, which can be
-- neither deleted nor given a lower epoch. The epoch starts at 0, the
-- epoch of every writer that predates it, so existing writers keep working
-- until an operator bumps it. The ReserveInsert, ClaimInsert and
-- CompleteOperation statements of queries.sql read writer_epoch;
-- control.sql reads and changes the row.

CREATE TABLE idem_control (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    writer_epoch INTEGER NOT NULL CHECK (writer_epoch >= 0),
    draining     INTEGER NOT NULL CHECK (draining IN (0, 1)),
    updated_at   INTEGER NOT NULL
) STRICT;

INSERT INTO idem_control (id, writer_epoch, draining, updated_at)
VALUES (1, 0, 0, CAST(round(unixepoch('subsec') * 1000000) AS INTEGER));

CREATE TRIGGER idem_control_no_delete BEFORE DELETE ON idem_control
BEGIN
    SELECT RAISE(ABORT, 'idem: the control row cannot be removed');
END;

CREATE TRIGGER idem_control_epoch BEFORE UPDATE ON idem_control
WHEN NEW.id IS NOT OLD.id OR NEW.writer_epoch < OLD.writer_epoch
BEGIN
    SELECT RAISE(ABORT, 'idem: the writer epoch never decreases');
END;
