-- Webhook sequences (webhook/sequence.go): the highest sequence number a
-- sender's stream has reached; the same table as idempg's migration 023
-- (see there).
CREATE TABLE idem_webhook_sequences (
    stream     TEXT    PRIMARY KEY CHECK (length(CAST(stream AS BLOB)) BETWEEN 1 AND 255),
    seq        INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
) STRICT;
