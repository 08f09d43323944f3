-- Tables of the two-phase HOT exploration (twophase.sh), on a database
-- that "idem migrate" prepared and setup.sql ran on: copies of
-- idem_operations (columns, CHECK, indexes; no triggers) that differ only
-- in what an UPDATE from RESERVED to SUCCEEDED may leave in place.
-- tp_asis: every index as it is.
CREATE TABLE tp_asis (LIKE idem_operations INCLUDING ALL);
-- tp_ff85: as it is, with room on each page for the updated version.
CREATE TABLE tp_ff85 (LIKE idem_operations INCLUDING ALL) WITH (fillfactor = 85);
-- tp_hotmax: only the indexes whose columns (and predicates) Complete
-- never changes: the primary key, the operation ID and the tombstones.
-- The upper bound of any HOT-able schema; it drops the indexes of the
-- active limit, TenantInFlight, Prune, lease recovery and the UNKNOWN
-- listing, so it is a measurement, not a candidate.
CREATE TABLE tp_hotmax (LIKE idem_operations INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 85);
ALTER TABLE tp_hotmax ADD PRIMARY KEY (scope), ADD UNIQUE (operation_id);
CREATE INDEX tp_hotmax_tombstones ON tp_hotmax (tombstone_until) WHERE tombstone_until IS NOT NULL;
-- tp_hotmax50: the same with half of each page free.
CREATE TABLE tp_hotmax50 (LIKE tp_hotmax INCLUDING ALL) WITH (fillfactor = 50);
-- tp_hotblocked: tp_hotmax's indexes and fillfactor plus one index that
-- never holds an entry (tombstone_until is NULL on every row written
-- here) but names state in its predicate, which alone makes every
-- completion UPDATE non-HOT: tp_hotmax against tp_hotblocked is HOT's
-- own effect, the same index inserts at reservation on both.
CREATE TABLE tp_hotblocked (LIKE tp_hotmax INCLUDING ALL) WITH (fillfactor = 85);
CREATE INDEX tp_hotblocked_state ON tp_hotblocked (tombstone_until) WHERE tombstone_until IS NOT NULL AND state = 'UNKNOWN';
-- tp_split: the in-flight bookkeeping and the retirement queue in tables
-- of their own, so that idem_operations keeps only indexes whose columns
-- never change (primary key, operation ID, tenant without state,
-- tombstones) and the completion UPDATE can be HOT: the reservation also
-- inserts tp_split_inflight's row (the active limit's, lease recovery's,
-- TenantInFlight's and the UNKNOWN listing's access path), the
-- completion deletes it and inserts tp_split_retire's (Prune's).
CREATE TABLE tp_split (LIKE idem_operations INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 85);
ALTER TABLE tp_split ADD PRIMARY KEY (scope), ADD UNIQUE (operation_id);
CREATE INDEX tp_split_tenant ON tp_split (tenant_hash);
CREATE INDEX tp_split_tombstones ON tp_split (tombstone_until) WHERE tombstone_until IS NOT NULL;
CREATE TABLE tp_split_inflight (scope bytea PRIMARY KEY, owner bytea NOT NULL, operation text NOT NULL,
                                state text NOT NULL, lease_until timestamptz NOT NULL, tenant_hash bytea,
                                created_at timestamptz NOT NULL);
CREATE INDEX tp_split_inflight_active ON tp_split_inflight (owner, operation);
CREATE INDEX tp_split_inflight_lease ON tp_split_inflight (lease_until);
CREATE INDEX tp_split_inflight_tenant ON tp_split_inflight (tenant_hash);
CREATE TABLE tp_split_retire (scope bytea PRIMARY KEY, expires_at timestamptz NOT NULL);
CREATE INDEX tp_split_retire_expires ON tp_split_retire (expires_at);
