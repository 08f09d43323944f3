-- Encrypted means authenticated (registry.Sealer, package keyring).
-- Statements end at a line that starts in the first column and ends
-- with ";" (migrate.go).
--
-- 1. A settled response changes only by a re-seal: resp_body and resp_key
-- change together, from one key to another key, never to or from NULL
-- (plaintext), and the digest, status, media type, Location, ETag and
-- state stay. The database cannot check that the new bytes hold the same
-- plaintext; the key ring does, on every read (the seal binds the
-- record's scope, operation ID and digest).
CREATE TRIGGER idem_operations_settled_body BEFORE UPDATE ON idem_operations
FOR EACH ROW
BEGIN
    IF OLD.state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') AND OLD.retired_at IS NULL
       AND NEW.retired_at IS NULL
       AND NOT (NEW.resp_body <=> OLD.resp_body AND NEW.resp_key <=> OLD.resp_key
                AND NEW.resp_digest <=> OLD.resp_digest AND NEW.resp_status <=> OLD.resp_status
                AND NEW.resp_media_type <=> OLD.resp_media_type AND NEW.resp_location <=> OLD.resp_location
                AND NEW.resp_etag <=> OLD.resp_etag AND NEW.state <=> OLD.state)
       AND NOT (OLD.resp_key IS NOT NULL AND NEW.resp_key IS NOT NULL AND NOT (NEW.resp_key <=> OLD.resp_key)
                AND NEW.resp_body IS NOT NULL AND NOT (NEW.resp_body <=> OLD.resp_body)
                AND NEW.resp_digest <=> OLD.resp_digest AND NEW.resp_status <=> OLD.resp_status
                AND NEW.resp_media_type <=> OLD.resp_media_type AND NEW.resp_location <=> OLD.resp_location
                AND NEW.resp_etag <=> OLD.resp_etag AND NEW.state <=> OLD.state) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'idem: a settled response changes only by a re-seal: body and key together, from one key to another, nothing else';
    END IF;
END;

-- 2. The keys each live instance holds (registry.KeyRoster): the IDs of
-- the keys it can open, space separated, with the time it last said so
-- (µs since the epoch).
CREATE TABLE idem_key_holders (
    instance VARCHAR(128) NOT NULL,
    key_ids  TEXT         NOT NULL,
    seen_at  BIGINT       NOT NULL,
    PRIMARY KEY (instance),
    CONSTRAINT idem_key_holders_instance CHECK (char_length(instance) BETWEEN 1 AND 128),
    CONSTRAINT idem_key_holders_key_ids CHECK (char_length(key_ids) <= 8192)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
