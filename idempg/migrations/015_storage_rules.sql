-- The storage layer keeps its own rules, and retention counts from
-- settlement (SPEC E5; registry/retention.go). Two parts:
--
-- A. Rules (docs/contract.md, "What the storage layer refuses") that hold
-- whatever writes: a buggy caller of the driver API or a database writer
-- with SQL. The drivers check the same rules in Go first
-- (idem.Response.Storable), so these only ever fire for a writer that
-- bypassed them.
--
-- 1. A stored response has a status of 2xx or 4xx (200–499, not a
--    redirect) and a body of at most 65536 bytes (idem.MaxStoredBody, the
--    snapshot cap) — that bounds the plaintext; a sealed body (resp_key
--    set) may be up to 1024 bytes longer (registry.MaxSealOverhead:
--    keyring adds 29). The conditions join idem_operations_valid
--    (migration 013), still ONE check constraint, re-added so that the
--    existing rows are checked once (one scan, under the migration's
--    lock). The same function now lets an abandoned reservation be a
--    tombstone (part B). A row that breaks a rule stops the migration,
--    naming idem_operations_valid; find it with
--      SELECT operation_id FROM idem_operations
--      WHERE NOT (resp_status BETWEEN 200 AND 299 OR resp_status BETWEEN 400 AND 499)
--         OR octet_length(resp_body) > 65536 + CASE WHEN resp_key IS NULL THEN 0 ELSE 1024 END;
CREATE OR REPLACE FUNCTION idem_operations_valid(
    scope bytea, owner bytea, fingerprint bytea, state text, owner_gen bigint,
    retired_at timestamptz, tombstone_until timestamptz, tombstone_ttl bigint,
    resp_status integer, resp_media_type text, resp_location text, resp_etag text,
    resp_body bytea, resp_digest bytea, resp_key text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    terminal boolean := state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED');
BEGIN
    RETURN
        coalesce(length(scope) = 32, true)
        AND coalesce(length(owner) = 32, true)
        AND coalesce(length(fingerprint) = 32, true)
        AND coalesce(state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED'), true)
        AND coalesce(owner_gen >= 1, true)
        AND coalesce((terminal AND retired_at IS NULL) =
            (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
             AND resp_etag IS NOT NULL AND resp_body IS NOT NULL
             AND resp_digest IS NOT NULL AND length(resp_digest) = 32), true)
        AND coalesce(terminal OR (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL), true)
        AND coalesce(tombstone_ttl > 0, true)
        -- A tombstone has no response; since 015 it may be an abandoned
        -- reservation's (RESERVED or EXECUTING), never an UNKNOWN record's.
        AND coalesce(retired_at IS NULL OR (
            state <> 'UNKNOWN' AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
            AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL), true)
        AND coalesce(tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL), true)
        AND coalesce(resp_key IS NULL OR resp_body IS NOT NULL, true)
        -- 015: the storage rules of a response.
        AND coalesce(resp_status BETWEEN 200 AND 299 OR resp_status BETWEEN 400 AND 499, true)
        AND coalesce(octet_length(resp_body) <= 65536 + CASE WHEN resp_key IS NULL THEN 0 ELSE 1024 END, true);
END
$$;

ALTER TABLE idem_operations DROP CONSTRAINT idem_operations_valid;
ALTER TABLE idem_operations ADD CONSTRAINT idem_operations_valid CHECK (idem_operations_valid(
    scope, owner, fingerprint, state, owner_gen, retired_at, tombstone_until, tombstone_ttl,
    resp_status, resp_media_type, resp_location, resp_etag, resp_body, resp_digest, resp_key));

-- 2. Evidence is not wiped wholesale: TRUNCATE of the registry, the
--    outbox, the effects, the reconciliation log and the prune runs is
--    refused, as it already was for idem_audit (014) and idem_control
--    (003). (TRUNCATE fires no row trigger, hence statement triggers.)
CREATE FUNCTION idem_no_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'idem: % keeps evidence and cannot be truncated', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER idem_operations_no_truncate BEFORE TRUNCATE ON idem_operations
    FOR EACH STATEMENT EXECUTE FUNCTION idem_no_truncate();
CREATE TRIGGER idem_outbox_no_truncate BEFORE TRUNCATE ON idem_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION idem_no_truncate();
CREATE TRIGGER idem_effects_no_truncate BEFORE TRUNCATE ON idem_effects
    FOR EACH STATEMENT EXECUTE FUNCTION idem_no_truncate();
CREATE TRIGGER idem_reconciliations_no_truncate BEFORE TRUNCATE ON idem_reconciliations
    FOR EACH STATEMENT EXECUTE FUNCTION idem_no_truncate();
CREATE TRIGGER idem_prune_runs_no_truncate BEFORE TRUNCATE ON idem_prune_runs
    FOR EACH STATEMENT EXECUTE FUNCTION idem_no_truncate();

-- 3. DELETE only on the paths that own it, told apart by the row alone
--    (no session setting a writer could set too). idem_operations keeps
--    its guard of 004 (a reservation, Store.Release; a tombstone with a
--    deletion time, Prune). The others:
--    * idem_outbox: Prune deletes the PUBLISHED messages of an operation
--      whose tombstone it deletes. A message may go when it was published
--      and its record is a tombstone with a deletion time or is gone
--      (Prune deletes both in one statement; either view passes). A
--      pending message, or one of a live record, stays.
--    * idem_effects, idem_reconciliations: Prune deletes them with their
--      operation's tombstone: the same condition on the record.
--    * idem_prune_runs: RecordPruneRun keeps the newest 100
--      (registry.MaxPruneRuns), its new run included; only a row with at
--      least 99 newer ones may go (the run its statement inserts may not
--      be visible to the trigger).
CREATE FUNCTION idem_record_deletable(p_operation_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM idem_operations
                       WHERE operation_id = p_operation_id AND tombstone_until IS NULL)
$$;

CREATE FUNCTION idem_outbox_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.published_at IS NULL OR NOT idem_record_deletable(OLD.operation_id) THEN
        RAISE EXCEPTION 'idem: an outbox message is deleted only once published, with its operation''s expiring tombstone'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;
CREATE FUNCTION idem_evidence_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT idem_record_deletable(OLD.operation_id) THEN
        RAISE EXCEPTION 'idem: a row of % is deleted only with its operation''s expiring tombstone', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;
CREATE TRIGGER idem_outbox_delete_guard BEFORE DELETE ON idem_outbox
    FOR EACH ROW EXECUTE FUNCTION idem_outbox_delete_guard();
CREATE TRIGGER idem_effects_delete_guard BEFORE DELETE ON idem_effects
    FOR EACH ROW EXECUTE FUNCTION idem_evidence_delete_guard();
CREATE TRIGGER idem_reconciliations_delete_guard BEFORE DELETE ON idem_reconciliations
    FOR EACH ROW EXECUTE FUNCTION idem_evidence_delete_guard();

CREATE FUNCTION idem_prune_runs_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT count(*) FROM (SELECT 1 FROM idem_prune_runs WHERE seq > OLD.seq LIMIT 99) AS newer) < 99 THEN
        RAISE EXCEPTION 'idem: only prune runs older than the newest 100 are deleted'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;
CREATE TRIGGER idem_prune_runs_delete_guard BEFORE DELETE ON idem_prune_runs
    FOR EACH ROW EXECUTE FUNCTION idem_prune_runs_delete_guard();

-- B. Retention from settlement, abandoned reservations retired.
--
-- The settling statements (queries.sql Finish, effects.sql Reconcile) set
-- expires_at to the settlement's instant plus the retention, which until
-- then is expires_at - created_at (Reserve set expires_at to created_at +
-- retention, and nothing changes either before settlement): a record is
-- kept for its full retention after it settles, however long it was in
-- flight or UNKNOWN.
--
-- An abandoned reservation — RESERVED or EXECUTING, no effect attempt
-- recorded (so nothing of it was committed), its lease expired a full
-- retention ago — is retired by Prune into a tombstone that keeps its
-- state: a retry gets KEY_RETIRED, as for any tombstone, and the key is
-- never run again under this record. The guard below is 010's, with that
-- one more legal change of an in-flight record: retired_at set no earlier
-- than lease_until + retention (by the pruner's clock, which the new
-- retired_at is), tombstone_until = retired_at + tombstone_ttl, and
-- nothing else changed. Its takeover (TakeOver needs retired_at IS NULL)
-- can no longer happen; a takeover that came first moved lease_until, so
-- the retirement no longer matches. UNKNOWN records are never retired.
CREATE OR REPLACE FUNCTION idem_operations_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.retired_at IS NOT NULL THEN
        RAISE EXCEPTION 'idem: a tombstone never changes'
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') THEN
        IF NEW.retired_at IS NULL THEN
            IF NEW.resp_key IS NULL OR NEW.resp_key IS NOT DISTINCT FROM OLD.resp_key
               OR NEW.state <> OLD.state OR NEW.tombstone_until IS NOT NULL
               OR NEW.resp_status IS DISTINCT FROM OLD.resp_status
               OR NEW.resp_media_type IS DISTINCT FROM OLD.resp_media_type
               OR NEW.resp_location IS DISTINCT FROM OLD.resp_location
               OR NEW.resp_etag IS DISTINCT FROM OLD.resp_etag
               OR NEW.resp_digest IS DISTINCT FROM OLD.resp_digest
               OR NEW.owner_gen <> OLD.owner_gen OR NEW.writer_epoch <> OLD.writer_epoch
               OR NEW.lease_until <> OLD.lease_until OR NEW.expires_at <> OLD.expires_at
               OR NEW.contract <> OLD.contract THEN
                RAISE EXCEPTION 'idem: a % record can only be retired or re-sealed under another key', OLD.state
                    USING ERRCODE = 'check_violation';
            END IF;
        ELSIF NEW.state <> OLD.state
           OR NEW.resp_status IS NOT NULL OR NEW.resp_media_type IS NOT NULL
           OR NEW.resp_location IS NOT NULL OR NEW.resp_etag IS NOT NULL
           OR NEW.resp_body IS NOT NULL OR NEW.resp_digest IS NOT NULL OR NEW.resp_key IS NOT NULL
           OR NEW.tombstone_until IS DISTINCT FROM NEW.retired_at + OLD.tombstone_ttl * interval '1 microsecond'
           OR NEW.owner_gen <> OLD.owner_gen OR NEW.writer_epoch <> OLD.writer_epoch
           OR NEW.lease_until <> OLD.lease_until OR NEW.expires_at <> OLD.expires_at
           OR NEW.contract <> OLD.contract THEN
            RAISE EXCEPTION 'idem: a % record can only be retired (response dropped, nothing else changed)', OLD.state
                USING ERRCODE = 'check_violation';
        END IF;
    ELSIF NEW.retired_at IS NOT NULL THEN
        -- The retirement of an abandoned reservation (015).
        IF OLD.state NOT IN ('RESERVED', 'EXECUTING') OR NEW.state <> OLD.state
           OR NEW.retired_at < OLD.lease_until + (OLD.expires_at - OLD.created_at)
           OR EXISTS (SELECT 1 FROM idem_effects x WHERE x.operation_id = OLD.operation_id)
           OR NEW.tombstone_until IS DISTINCT FROM NEW.retired_at + OLD.tombstone_ttl * interval '1 microsecond'
           OR NEW.owner_gen <> OLD.owner_gen OR NEW.writer_epoch <> OLD.writer_epoch
           OR NEW.lease_until <> OLD.lease_until OR NEW.expires_at <> OLD.expires_at
           OR NEW.contract <> OLD.contract THEN
            RAISE EXCEPTION 'idem: a % record can only be retired when abandoned (no effect, lease expired a retention ago), nothing else changed', OLD.state
                USING ERRCODE = 'check_violation';
        END IF;
    ELSE
        IF (OLD.state, NEW.state) NOT IN (
            ('RESERVED', 'RESERVED'), ('RESERVED', 'EXECUTING'), ('RESERVED', 'SUCCEEDED'),
            ('RESERVED', 'FAILED_FINAL'), ('RESERVED', 'REJECTED'),
            ('EXECUTING', 'EXECUTING'), ('EXECUTING', 'SUCCEEDED'), ('EXECUTING', 'FAILED_FINAL'),
            ('EXECUTING', 'UNKNOWN'),
            ('UNKNOWN', 'SUCCEEDED'), ('UNKNOWN', 'FAILED_FINAL')
        ) THEN
            RAISE EXCEPTION 'idem: illegal state transition % -> %', OLD.state, NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.tombstone_until IS NOT NULL THEN
            RAISE EXCEPTION 'idem: only a tombstone has a deletion time'
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    IF NEW.scope <> OLD.scope OR NEW.operation_id <> OLD.operation_id OR NEW.fingerprint <> OLD.fingerprint
       OR NEW.owner <> OLD.owner OR NEW.operation <> OLD.operation OR NEW.created_at <> OLD.created_at
       OR NEW.tombstone_ttl IS DISTINCT FROM OLD.tombstone_ttl
       OR NEW.owner_gen < OLD.owner_gen THEN
        RAISE EXCEPTION 'idem: identity columns are immutable and owner_gen never decreases'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

-- Store.Release deletes a live reservation only: an abandoned one's
-- tombstone goes only as any tombstone does (a deletion time, Prune).
CREATE OR REPLACE FUNCTION idem_operations_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ((OLD.state = 'RESERVED' AND OLD.retired_at IS NULL) OR OLD.tombstone_until IS NOT NULL) THEN
        RAISE EXCEPTION 'idem: a % record cannot be deleted (only reservations and expiring tombstones can)', OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN OLD;
END
$$;
