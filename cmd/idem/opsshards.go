package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"

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
	if !f.sharded() {
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
	if !f.sharded() {
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

// onShard is a row and the shard it was read from ("" without shards).
type onShard[T any] struct {
	shard string
	v     T
}

// readShards reads rows with read from --db's store or from every
// --shard's; with shards it merges them in order (stable) and keeps the
// first limit. It returns withStore's exit code.
func readShards[T any](ctx context.Context, f opsFlags, name string, std stdio, read func(registry.Store) ([]T, error),
	order func(a, b T) int, limit int) ([]onShard[T], int) {
	var rows []onShard[T]
	code := f.eachStore(ctx, name, std, func(shard string, store registry.Store) error {
		got, err := read(store)
		for _, v := range got {
			rows = append(rows, onShard[T]{shard, v})
		}
		return err
	})
	if f.sharded() {
		slices.SortStableFunc(rows, func(a, b onShard[T]) int { return cmp.Or(order(a.v, b.v), cmp.Compare(a.shard, b.shard)) })
		rows = rows[:min(len(rows), limit)]
	}
	return rows, code
}

// sharded reports whether --shard was given.
func (f opsFlags) sharded() bool { return f.shards != nil && len(f.shards.names) > 0 }
