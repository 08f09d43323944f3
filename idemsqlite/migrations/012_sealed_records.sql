-- Encrypted means authenticated (registry.Sealer, package keyring).
--
-- 1. A settled response never changes except by a re-seal. The terminal
-- trigger of 009 accepted a re-seal as "resp_key changes to another
-- non-NULL key", which let a writer go from plaintext (NULL) to a key
-- with any body, and let a body change with its key. This trigger, next
-- to that one (its own name, so a later redefinition of that trigger
-- keeps it), accepts a change of a terminal, unretired record's response
-- only when it is a re-seal: resp_body and resp_key change together, from
-- one key to another key, never to or from NULL (plaintext), and the
-- digest, status, media type, Location, ETag and state stay. The database
-- cannot check that the new bytes hold the same plaintext; the key ring
-- does, on every read: the seal binds the record's scope, operation ID
-- and digest (registry.ResponseOf), so bytes not sealed for this record
-- and this digest do not open, and a Store with a key ring refuses
-- plaintext.
CREATE TRIGGER idem_operations_settled_body BEFORE UPDATE ON idem_operations
WHEN OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL
  AND NEW.retired_at IS NULL
  AND (NEW.resp_body IS NOT OLD.resp_body OR NEW.resp_key IS NOT OLD.resp_key
       OR NEW.resp_digest IS NOT OLD.resp_digest OR NEW.resp_status IS NOT OLD.resp_status
       OR NEW.resp_media_type IS NOT OLD.resp_media_type OR NEW.resp_location IS NOT OLD.resp_location
       OR NEW.resp_etag IS NOT OLD.resp_etag OR NEW.state IS NOT OLD.state)
  AND NOT (OLD.resp_key IS NOT NULL AND NEW.resp_key IS NOT NULL AND NEW.resp_key IS NOT OLD.resp_key
           AND NEW.resp_body IS NOT NULL AND NEW.resp_body IS NOT OLD.resp_body
           AND NEW.resp_digest IS OLD.resp_digest AND NEW.resp_status IS OLD.resp_status
           AND NEW.resp_media_type IS OLD.resp_media_type AND NEW.resp_location IS OLD.resp_location
           AND NEW.resp_etag IS OLD.resp_etag AND NEW.state IS OLD.state)
BEGIN
    SELECT RAISE(ABORT, 'idem: a settled response changes only by a re-seal: body and key together, from one key to another, nothing else');
END;

-- 2. The keys each live instance holds (registry.KeyRoster): every
-- instance with a key ring writes the IDs of the keys it can open, space
-- separated, with the time it last did (µs since the epoch), and
-- refreshes the row while it runs. A new active key is used for new
-- bodies only once every instance seen within the window holds it, and
-- idem keys rotate refuses while one does not; an instance that stops
-- deletes its row, one that crashed ages out of the window.
CREATE TABLE idem_key_holders (
    instance TEXT    PRIMARY KEY CHECK (length(instance) BETWEEN 1 AND 128),
    key_ids  TEXT    NOT NULL CHECK (length(key_ids) <= 8192),
    seen_at  INTEGER NOT NULL
) STRICT;

-- 3. Outbox payloads are sealed too when a key ring is configured: the
-- ID of the key that sealed a payload, bound to its message ID and topic
-- (registry.MessageOf); NULL for plaintext, which a Store with a key ring
-- never hands a relay (the message becomes a dead letter instead).
ALTER TABLE idem_outbox ADD COLUMN payload_key TEXT NULL;
