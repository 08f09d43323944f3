-- Outbox delivery (SPEC E4, registry/outbox.go): failed attempts, backoff
-- and dead letters. Existing rows get no attempts and no error and stay
-- pending, as they were.
--
-- attempts        failed delivery attempts recorded (FailOutbox)
-- last_error      why the last attempt failed
-- last_attempt_at when it was recorded
-- dead_at         when the relay gave up: a dead letter is never claimed
--                 again until RequeueOutbox makes it pending
--
-- claimed_until (001) now also holds the backoff: a failed attempt sets it
-- to the time of the next attempt, so ClaimOutbox's "no claim lasts" test
-- is also "the backoff has passed".
ALTER TABLE idem_outbox
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    ADD COLUMN last_error      text,
    ADD COLUMN last_attempt_at timestamptz,
    ADD COLUMN dead_at         timestamptz;

-- The claim's index covers the claimable messages only: dead letters may
-- pile up without slowing it down. They have a small index of their own.
DROP INDEX idem_outbox_pending;
CREATE INDEX idem_outbox_pending ON idem_outbox (seq) WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX idem_outbox_dead ON idem_outbox (seq) WHERE published_at IS NULL AND dead_at IS NOT NULL;
