-- Retention (SPEC E5, registry/retention.go): expired terminal records
-- become tombstones; tombstones of operations that declared a
-- TombstoneTTL are deleted after it. retention.sql holds the Prune
-- statement; the record columns of queries.sql include the new columns.
--
--   retired_at       when the record was retired (NULL: it is not a tombstone)
--   tombstone_until  when the tombstone may be deleted (NULL: never); set at
--                    retirement to retired_at + tombstone_ttl
--   tombstone_ttl    Claim.TombstoneTTL in microseconds, fixed at the claim
--                    (NULL: keep the tombstone forever, the default)
--
-- Adding nullable columns without default rewrites nothing; the new CHECK
-- constraints are validated by one scan of idem_operations under the
-- migration's lock, and the new indexes are built in the same transaction
-- (see 002 for building them CONCURRENTLY by hand on a large table).

ALTER TABLE idem_operations
    ADD COLUMN retired_at      timestamptz,
    ADD COLUMN tombstone_until timestamptz,
    ADD COLUMN tombstone_ttl   bigint CONSTRAINT idem_operations_tombstone_ttl CHECK (tombstone_ttl > 0);

-- A terminal record carries a complete response snapshot unless it is a
-- tombstone; no other record does (idem_operations_response_absent, 001,
-- keeps in-flight records without one).
ALTER TABLE idem_operations DROP CONSTRAINT idem_operations_response;
ALTER TABLE idem_operations ADD CONSTRAINT idem_operations_response CHECK (
    (state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND retired_at IS NULL) =
    (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
     AND resp_etag IS NOT NULL AND resp_body IS NOT NULL
     AND resp_digest IS NOT NULL AND length(resp_digest) = 32)
);
-- A tombstone is a terminal record without any part of its response.
ALTER TABLE idem_operations ADD CONSTRAINT idem_operations_tombstone CHECK (
    retired_at IS NULL OR (
        state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')
        AND resp_status IS NULL AND resp_media_type IS NULL AND resp_location IS NULL
        AND resp_etag IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
);
-- Only a tombstone has a deletion time, and only if its claim gave a TTL.
ALTER TABLE idem_operations ADD CONSTRAINT idem_operations_tombstone_until CHECK (
    tombstone_until IS NULL OR (retired_at IS NOT NULL AND tombstone_ttl IS NOT NULL)
);

-- What Prune looks for: terminal records not yet retired, by expiry, and
-- tombstones with a deletion time, by that time. Both partial, so neither
-- grows with the tombstones that are kept forever.
CREATE INDEX idem_operations_retire ON idem_operations (expires_at)
    WHERE retired_at IS NULL AND state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED');
CREATE INDEX idem_operations_tombstones ON idem_operations (tombstone_until)
    WHERE tombstone_until IS NOT NULL;
-- Prune deletes the published outbox messages of deleted tombstones.
CREATE INDEX IF NOT EXISTS idem_outbox_operation ON idem_outbox (operation_id);

-- The transition guard of 001, extended: the legal changes of an in-flight
-- or UNKNOWN record are still exactly those of idem.CanTransition, and
-- none of them may retire it; the only change allowed to a terminal record
-- is its retirement — retired_at from NULL to a time, the whole response
-- dropped, tombstone_until = retired_at + tombstone_ttl, state, lease,
-- expiry, generation and epoch unchanged (updated_at may move); a
-- tombstone never changes. Identity columns, tombstone_ttl included, never
-- change and the owner generation never goes down.
CREATE OR REPLACE FUNCTION idem_operations_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.retired_at IS NOT NULL THEN
        RAISE EXCEPTION 'idem: a tombstone never changes'
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') THEN
        IF NEW.retired_at IS NULL OR NEW.state <> OLD.state
           OR NEW.resp_status IS NOT NULL OR NEW.resp_media_type IS NOT NULL
           OR NEW.resp_location IS NOT NULL OR NEW.resp_etag IS NOT NULL
           OR NEW.resp_body IS NOT NULL OR NEW.resp_digest IS NOT NULL
           OR NEW.tombstone_until IS DISTINCT FROM NEW.retired_at + OLD.tombstone_ttl * interval '1 microsecond'
           OR NEW.owner_gen <> OLD.owner_gen OR NEW.writer_epoch <> OLD.writer_epoch
           OR NEW.lease_until <> OLD.lease_until OR NEW.expires_at <> OLD.expires_at
           OR NEW.contract <> OLD.contract THEN
            RAISE EXCEPTION 'idem: a % record can only be retired (response dropped, nothing else changed)', OLD.state
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
        IF NEW.retired_at IS NOT NULL OR NEW.tombstone_until IS NOT NULL THEN
            RAISE EXCEPTION 'idem: only a terminal record can be retired, not a % one', OLD.state
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

-- Deleting a record forgets that its operation ran, so a retry would run
-- it again. Only two deletions are legal: Store.Release of a reservation
-- (RESERVED, nothing outside the database happened) and Prune of a
-- tombstone whose operation declared a TombstoneTTL. (Whether that
-- tombstone's time has come is Prune's to check: the database cannot see
-- an injected clock.)
CREATE FUNCTION idem_operations_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (OLD.state = 'RESERVED' OR OLD.tombstone_until IS NOT NULL) THEN
        RAISE EXCEPTION 'idem: a % record cannot be deleted (only reservations and expiring tombstones can)', OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER idem_operations_delete_guard BEFORE DELETE ON idem_operations
    FOR EACH ROW EXECUTE FUNCTION idem_operations_delete_guard();
