-- In-flight records per owner and operation, for Claim.MaxActive: the
-- limited Reserve and Claim statements count the owner's RESERVED and
-- EXECUTING records of one operation, which this partial index keeps to
-- an index range scan of at most MaxActive entries. It holds in-flight
-- rows only, so it stays small however long terminal records are kept.
--
-- Plain CREATE INDEX, because migrations run in one transaction (CREATE
-- INDEX CONCURRENTLY cannot): it blocks writes to idem_operations while
-- it builds. On a large existing table, create the index CONCURRENTLY by
-- hand first; IF NOT EXISTS then makes this migration a no-op.
CREATE INDEX IF NOT EXISTS idem_operations_active ON idem_operations (owner, operation)
    WHERE state IN ('RESERVED', 'EXECUTING');
