-- Webhook sequences (webhook/sequence.go): the highest sequence number a
-- sender's stream has reached; the same table as idempg's migration 023
-- (see there). VARBINARY: a stream compares byte for byte, as on the
-- other engines.
CREATE TABLE idem_webhook_sequences (
    stream     VARBINARY(255) NOT NULL PRIMARY KEY,
    seq        BIGINT         NOT NULL,
    updated_ms BIGINT         NOT NULL,
    CONSTRAINT idem_webhook_sequences_stream CHECK (length(stream) >= 1)
);
