-- Bodies sealed at rest (SPEC C4, package keyring): a Store with a
-- registry.Sealer keeps response bodies and effect requests and answers
-- encrypted, and names the key that sealed each in the *_key column next
-- to it. NULL means plaintext (a Store without a Sealer, or a body stored
-- before encryption was turned on). The digest stays over the plaintext
-- and is checked after opening.
ALTER TABLE idem_operations ADD COLUMN resp_key TEXT NULL
    CONSTRAINT idem_operations_resp_key CHECK (resp_key IS NULL OR resp_body IS NOT NULL);
ALTER TABLE idem_effects ADD COLUMN request_key TEXT NULL
    CONSTRAINT idem_effects_request_key CHECK (request_key IS NULL OR request IS NOT NULL);
ALTER TABLE idem_effects ADD COLUMN answer_key TEXT NULL
    CONSTRAINT idem_effects_answer_key CHECK (answer_key IS NULL OR answer IS NOT NULL);

-- The terminal-record trigger of 004, with one more legal change: a
-- re-seal (Reseal, idem keys rotate) — the body re-encrypted under another
-- key, named in resp_key, and nothing else changed: digest, status, media
-- type, Location, ETag, state, lease, expiry, generation and epoch stay,
-- so the plaintext the digest covers cannot change unnoticed. Retirement
-- now drops resp_key with the rest of the response.
DROP TRIGGER idem_operations_terminal;
CREATE TRIGGER idem_operations_terminal BEFORE UPDATE ON idem_operations
WHEN OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL AND (
    CASE WHEN NEW.retired_at IS NULL THEN -- a re-seal
        NEW.resp_key IS NULL OR NEW.resp_key IS OLD.resp_key OR NEW.tombstone_until IS NOT NULL
        OR NEW.resp_body IS NULL
        OR NEW.resp_status IS NOT OLD.resp_status OR NEW.resp_media_type IS NOT OLD.resp_media_type
        OR NEW.resp_location IS NOT OLD.resp_location OR NEW.resp_etag IS NOT OLD.resp_etag
        OR NEW.resp_digest IS NOT OLD.resp_digest
    ELSE -- a retirement
        NEW.resp_status IS NOT NULL OR NEW.resp_media_type IS NOT NULL
        OR NEW.resp_location IS NOT NULL OR NEW.resp_etag IS NOT NULL
        OR NEW.resp_body IS NOT NULL OR NEW.resp_digest IS NOT NULL OR NEW.resp_key IS NOT NULL
        OR NEW.tombstone_until IS NOT NEW.retired_at + OLD.tombstone_ttl
    END
    OR NEW.state IS NOT OLD.state
    OR NEW.owner_gen IS NOT OLD.owner_gen OR NEW.writer_epoch IS NOT OLD.writer_epoch
    OR NEW.lease_until IS NOT OLD.lease_until OR NEW.expires_at IS NOT OLD.expires_at
    OR NEW.contract IS NOT OLD.contract)
BEGIN
    SELECT RAISE(ABORT, 'idem: a terminal record can only be retired or re-sealed under another key');
END;

-- The effects guard of 006: an effect's stored request still never
-- changes, except re-sealed under another key (request_key changes with it).
DROP TRIGGER idem_effects_guard;
CREATE TRIGGER idem_effects_guard BEFORE UPDATE ON idem_effects
WHEN NEW.operation_id IS NOT OLD.operation_id OR NEW.name IS NOT OLD.name
  OR NEW.downstream_key IS NOT OLD.downstream_key OR NEW.created_at IS NOT OLD.created_at
  OR NEW.owner_gen < OLD.owner_gen
  OR (OLD.request IS NOT NULL AND NEW.request IS NOT OLD.request
      AND (NEW.request_key IS NULL OR NEW.request_key IS OLD.request_key))
BEGIN
    SELECT RAISE(ABORT, 'idem: an effect''s key, request and identity never change and owner_gen never decreases');
END;
