-- In-flight records per owner and operation, for Claim.MaxActive: the
-- limited ReserveInsert and ClaimInsert statements count the owner's
-- RESERVED and EXECUTING records of one operation, which this partial
-- index keeps to a range scan of at most MaxActive entries. It holds
-- in-flight rows only, so it stays small however long terminal records
-- are kept. (The statements repeat its WHERE term verbatim: SQLite uses a
-- partial index only when the query's WHERE clause contains it.)
CREATE INDEX IF NOT EXISTS idem_operations_active ON idem_operations (owner, operation)
    WHERE state IN ('RESERVED', 'EXECUTING');
