-- Recovery attempts (registry/attempts.go): for an UNKNOWN operation the
-- recovery worker could not settle yet, how many attempts failed, the
-- last one's error and when the worker will try next — shown on the
-- console's operation page. Display only: nothing is ever settled from
-- this table. One row per operation, changed by a compare-and-set on
-- attempts; the worker deletes it when it settles the operation. The
-- same table as idemsqlite's migration 019 and idemmysql's 010.
CREATE TABLE idem_recovery_attempts (
    operation_id text   PRIMARY KEY CHECK (operation_id <> ''),
    attempts     bigint NOT NULL CHECK (attempts > 0),
    last_error   text   NOT NULL,
    attempted_ms bigint NOT NULL, -- Unix milliseconds of the last failed attempt
    next_ms      bigint NOT NULL  -- Unix milliseconds of the next attempt
);
