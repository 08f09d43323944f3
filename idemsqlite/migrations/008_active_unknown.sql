-- Claim.MaxActive counts UNKNOWN records too (SPEC C4, key flooding): an
-- operation whose outcome outside the database is not known yet is still
-- in flight for its owner, and a principal that floods a downstream into
-- timeouts must not escape the bound by turning its reservations UNKNOWN.
-- The limited statements of queries.sql repeat this WHERE verbatim, so
-- SQLite uses the partial index.
CREATE INDEX IF NOT EXISTS idem_operations_inflight ON idem_operations (owner, operation)
    WHERE state IN ('RESERVED', 'EXECUTING', 'UNKNOWN');
DROP INDEX IF EXISTS idem_operations_active;
