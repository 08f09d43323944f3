-- Webhook sequences (webhook/sequence.go): the highest sequence number a
-- sender's stream has reached, for receivers whose events must apply in
-- order. webhook.AdvanceSequence reads a stream's row and moves it
-- forward with one compare-and-set (seq < the new one), in the
-- delivery's own transaction, so an older or repeated event changes
-- nothing and the answer stored for it says so. The same table as
-- idemsqlite's migration 018 and idemmysql's 009.
CREATE TABLE idem_webhook_sequences (
    stream     text        PRIMARY KEY CHECK (octet_length(stream) BETWEEN 1 AND 255),
    seq        bigint      NOT NULL,
    updated_ms bigint      NOT NULL -- Unix milliseconds of the last advance
);
