-- The registry's control row (SPEC E6): the writer epoch that fences older
-- writers and the drain flag. Exactly one row, id 1, which can be neither
-- deleted nor given a lower epoch. The epoch starts at 0, the epoch of
-- every writer that predates it, so existing writers keep working until an
-- operator bumps it. The Reserve, Claim and Finish statements of
-- queries.sql read writer_epoch; control.sql reads and changes the row.

CREATE TABLE idem_control (
    id           integer     PRIMARY KEY CHECK (id = 1),
    writer_epoch bigint      NOT NULL CHECK (writer_epoch >= 0),
    draining     boolean     NOT NULL,
    updated_at   timestamptz NOT NULL
);

INSERT INTO idem_control (id, writer_epoch, draining, updated_at)
VALUES (1, 0, false, statement_timestamp());

CREATE FUNCTION idem_control_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION 'idem: the control row cannot be removed (%)', TG_OP
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.id <> OLD.id OR NEW.writer_epoch < OLD.writer_epoch THEN
        RAISE EXCEPTION 'idem: the writer epoch never decreases'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER idem_control_guard BEFORE UPDATE OR DELETE ON idem_control
    FOR EACH ROW EXECUTE FUNCTION idem_control_guard();
CREATE TRIGGER idem_control_no_truncate BEFORE TRUNCATE ON idem_control
    FOR EACH STATEMENT EXECUTE FUNCTION idem_control_guard();
