-- Bodies sealed at rest (SPEC C4, package keyring): a Store with a
-- registry.Sealer keeps response bodies and effect requests and answers
-- encrypted, and names the key that sealed each in the *_key column next
-- to it. NULL means plaintext (a Store without a Sealer, or a body stored
-- before encryption was turned on). The digest stays over the plaintext
-- and is checked after opening.
ALTER TABLE idem_operations ADD COLUMN resp_key text NULL,
    ADD CONSTRAINT idem_operations_resp_key CHECK (resp_key IS NULL OR resp_body IS NOT NULL);
ALTER TABLE idem_effects ADD COLUMN request_key text NULL, ADD COLUMN answer_key text NULL,
    ADD CONSTRAINT idem_effects_sealed CHECK ((request_key IS NULL OR request IS NOT NULL)
                                              AND (answer_key IS NULL OR answer IS NOT NULL));

-- The guard of 004, with one more legal change of a terminal record: a
-- re-seal (Reseal, idem keys rotate) — the body re-encrypted under another
-- key, named in resp_key, and nothing else changed: digest, status, media
-- type, Location, ETag, state, lease, expiry, generation and epoch stay,
-- so the plaintext the digest covers cannot change unnoticed. Retirement
-- now drops resp_key with the rest of the response.
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

-- The guard of 007: an effect's stored request still never changes, except
-- re-sealed under another key (request_key changes with it).
CREATE OR REPLACE FUNCTION idem_effects_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.operation_id <> OLD.operation_id OR NEW.name <> OLD.name
       OR NEW.downstream_key <> OLD.downstream_key OR NEW.created_at <> OLD.created_at
       OR NEW.owner_gen < OLD.owner_gen
       OR (OLD.request IS NOT NULL AND NEW.request IS DISTINCT FROM OLD.request
           AND (NEW.request_key IS NULL OR NEW.request_key IS NOT DISTINCT FROM OLD.request_key)) THEN
        RAISE EXCEPTION 'idem: an effect''s key, request and identity never change and owner_gen never decreases'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
