-- What an effect attempt sent downstream and what settled it (SPEC E1–E2:
-- an outcome is recorded only on evidence, and however an operation is
-- settled its replay is the operation's own rendering of the effect's
-- result).
--
-- request: the bytes sent downstream, stored with the attempt before the
-- call, so a recoverer can re-send exactly them with the same downstream
-- key without the client's request. Once stored it never changes.
-- answer: the downstream's answer that settled the attempt (a definite
-- result, as the downstream returned it), from which the operation renders
-- its response.
ALTER TABLE idem_effects ADD COLUMN request bytea NULL, ADD COLUMN answer bytea NULL;

CREATE OR REPLACE FUNCTION idem_effects_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.operation_id <> OLD.operation_id OR NEW.name <> OLD.name
       OR NEW.downstream_key <> OLD.downstream_key OR NEW.created_at <> OLD.created_at
       OR NEW.owner_gen < OLD.owner_gen
       OR (OLD.request IS NOT NULL AND NEW.request IS DISTINCT FROM OLD.request) THEN
        RAISE EXCEPTION 'idem: an effect''s key, request and identity never change and owner_gen never decreases'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
