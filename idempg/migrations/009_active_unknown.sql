-- Claim.MaxActive counts UNKNOWN records too (SPEC C4, key flooding): an
-- operation whose outcome outside the database is not known yet is still
-- in flight for its owner, and a principal that floods a downstream into
-- timeouts must not escape the bound by turning its reservations UNKNOWN.
-- The limited statements of queries.sql count the same three states, so
-- this partial index still serves them. (Built in the migration's
-- transaction, as 002 explains; on a large table create the new index
-- CONCURRENTLY by hand under the name idem_operations_inflight first.)
CREATE INDEX IF NOT EXISTS idem_operations_inflight ON idem_operations (owner, operation)
    WHERE state IN ('RESERVED', 'EXECUTING', 'UNKNOWN');
DROP INDEX IF EXISTS idem_operations_active;
