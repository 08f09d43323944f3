-- Tenant-sharded registries (package shard, issue 24): the map from
-- tenants to shard names, kept in ONE designated database of the
-- service's shards (the directory shard). Every shard carries the tables
-- (the migrations are the same everywhere); only the directory shard's
-- are read. A tenant without a row goes to the default shard, the one
-- row of idem_shard_default. Each row changes with a compare-and-set on
-- version (idempg/shard.sql).
CREATE TABLE idem_shard_directory (
    tenant      text        PRIMARY KEY CHECK (octet_length(tenant) <= 4000),
    shard       text        NOT NULL CHECK (shard ~ '^[A-Za-z0-9_-]{1,64}$'),
    draining    boolean     NOT NULL DEFAULT false,
    version     bigint      NOT NULL CHECK (version >= 1),
    updated_at  timestamptz NOT NULL,
    updated_by  text        NOT NULL CHECK (updated_by <> '')
);

CREATE TABLE idem_shard_default (
    one         boolean     PRIMARY KEY DEFAULT true CHECK (one),
    shard       text        NOT NULL CHECK (shard ~ '^[A-Za-z0-9_-]{1,64}$'),
    updated_at  timestamptz NOT NULL,
    updated_by  text        NOT NULL CHECK (updated_by <> '')
);
