package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/idemkit/idem/registry"
)

// "idem ops list|show|reconcile|audit --shard NAME=DSN …": the ops
// actions over the shards of a sharded service (docs/operations.md,
// "Tenant-sharded registries"), one store open at a time.

// addShards registers --shard on f; each action that takes it calls it.
func (f *opsFlags) addShards() {
	f.shards = &shardList{}
	f.Var(f.shards, "shard", "`NAME=DSN`, repeatable, instead of --db: the shards of a sharded service; every shard is read and each row names its shard")
	f.after = append(f.after, func() error {
		given := false
		f.Visit(func(fl *flag.Flag) { given = given || fl.Name == "db" || fl.Name == "db-file" })
		if given && len(f.shards.names) > 0 {
			return usageError("give --db or --shard, not both")
		}
		return nil
	})
}

// eachStore runs fn on the store of --db (shard "") or on every
// --shard's store in the order given, stopping at the first failure;
// it returns the exit code of withStore.
func (f opsFlags) eachStore(ctx context.Context, name string, std stdio, fn func(shard string, store registry.Store) error) int {
	if f.shards == nil || len(f.shards.names) == 0 {
		return withStore(ctx, name, *f.db, *f.keys, std, func(st registry.Store) error { return fn("", st) })
	}
	for _, n := range f.shards.names {
		if code := withStore(ctx, name, f.shards.dsns[n], *f.keys, std, func(st registry.Store) error { return fn(n, st) }); code != exitOK {
			return code
		}
	}
	return exitOK
}

// withOperation runs fn on the store that holds operation id: --db's,
// or the --shard whose registry has it (an operation lives on its
// tenant's shard only). None holding it is an error (exit 1).
func (f opsFlags) withOperation(ctx context.Context, name, id string, std stdio, fn func(shard string, store registry.Store) error) int {
	if f.shards == nil || len(f.shards.names) == 0 {
		return withStore(ctx, name, *f.db, *f.keys, std, func(st registry.Store) error { return fn("", st) })
	}
	for _, n := range f.shards.names {
		found := false
		code := withStore(ctx, name, f.shards.dsns[n], *f.keys, std, func(st registry.Store) error {
			if _, err := st.GetByID(ctx, id); errors.Is(err, registry.ErrNotFound) {
				return nil
			} else if err != nil {
				return err
			}
			found = true
			return fn(n, st)
		})
		if found || code != exitOK {
			return code
		}
	}
	fmt.Fprintf(std.err, "idem %s: operation %s not found on any shard\n", name, printable(id))
	return exitRefused
}

// byNewest orders audit entries of several shards newest first.
func byNewest(a, b shardAudit) int {
	return cmp.Or(b.e.At.Compare(a.e.At), cmp.Compare(a.shard, b.shard))
}

// shardAudit is an audit entry and its shard.
type shardAudit struct {
	shard string
	e     registry.AuditEntry
}
