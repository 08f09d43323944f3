// Package shard routes each operation to the registry that holds its
// tenant's data, for a service whose tenants are spread over several
// databases (tenant-sharded registries; docs/operations.md, "Outgrowing
// one machine").
//
// idem records an operation's outcome in the same transaction as its
// business rows, so the registry of a tenant must live in the database
// that holds the tenant's business tables: each shard is one
// registry.Store with the business tables beside it. A
// shardmap.Directory maps tenants to shard names, with an explicit
// default for tenants without an entry: shardmap.StaticDirectory reads a
// JSON map (a file, flags, tests); idempg.ShardDirectory keeps the map
// in a table of one designated PostgreSQL database, changed with a
// compare-and-set on each entry's Version. Move moves a tenant between
// shards (docs/shards-move.md).
//
// A Router caches the directory's answers for a bounded time and fails
// closed: once an entry is older than MaxAge and cannot be read again,
// Route errs rather than route by a stale map. Handler authenticates a
// request once, finds the caller's shard and serves the request with
// that shard's handler (one idemhttp.Middleware per operation per
// shard), monitor links included; Router.Admit refuses a draining
// tenant's new operations with 503 DRAINING (its replays are still
// served), as the Middleware.Admit of every shard's operations.
//
// idem does not run transactions across shards: an operation's record,
// its business rows and its outbox messages are on its tenant's shard.
//
// Everything in this package is safe for concurrent use.
package shard
