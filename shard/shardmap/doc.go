// Package shardmap holds the map of a tenant-sharded service's tenants to
// its shards: the Directory interface and its Entry, the rules every
// directory applies to the names it holds (Storable, ValidShardName,
// CheckSet), and StaticDirectory, a map read from JSON (a file, flags,
// tests). idempg.ShardDirectory keeps the map in a table of one
// designated PostgreSQL database. Package shard routes requests by it
// and moves tenants between shards; this package has no HTTP and no
// database code, so that drivers can implement a Directory without
// linking the HTTP layer.
//
// Everything in this package is safe for concurrent use.
package shardmap
