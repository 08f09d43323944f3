package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/idemkit/idem/harness/gate"
	"github.com/idemkit/idem/shard/shardmap"
)

// gateShardFlags are "idem gate"'s --shard NAME=DSN (repeatable),
// --shard-default NAME, --shard-map FILE, --tenants N, --move TENANT=SHARD
// and --move-crash: the gate across shards (gate.Config.Shards and
// Moves, docs/gate.md).
type gateShardFlags struct {
	list    *shardList
	def     *string
	mapFile *string
}

// addGateShardFlags registers the flags on fs; --tenants goes to cfg.
func addGateShardFlags(fs *flag.FlagSet, cfg *gate.Config) gateShardFlags {
	f := gateShardFlags{list: &shardList{}}
	fs.Var(f.list, "shard", "`NAME=DSN`, repeatable, instead of --db: run the instances over these shards (idem serve --shard) and verify each one")
	f.def = fs.String("shard-default", "", "with --shard: the shard `NAME` of tenants the map does not name (required)")
	f.mapFile = fs.String("shard-map", "", "with --shard: the shard map `FILE` ({\"default\":…,\"tenants\":{\"tenant-1\":…}}) the instances route by; without it every tenant goes to --shard-default")
	fs.IntVar(&cfg.Tenants, "tenants", 0, "tenants the principals are spread over, tenant-0 … (0: two); at most --principals")
	fs.Func("move", "`TENANT=SHARD`, repeatable, with --shard: move the tenant there midway through the load (idem shard move); "+
		"the instances then read the map from the directory table of --shard-default, which must be PostgreSQL", func(v string) error {
		tenant, to, ok := strings.Cut(v, "=")
		if !ok || tenant == "" || to == "" {
			return fmt.Errorf("want TENANT=SHARD, got %q", v)
		}
		cfg.Moves = append(cfg.Moves, gate.TenantMove{Tenant: tenant, To: to})
		return nil
	})
	fs.BoolVar(&cfg.MoveCrash, "move-crash", false, "with --move: kill the first mover with SIGKILL once, after its copy, and resume it")
	return f
}

// apply puts the shards and their map in cfg; a usage error is a
// usageError.
func (f gateShardFlags) apply(cfg *gate.Config) error {
	if len(f.list.names) == 0 {
		if *f.def != "" || *f.mapFile != "" || len(cfg.Moves) > 0 {
			return usageError("--shard-default, --shard-map and --move need --shard")
		}
		return nil
	}
	if cfg.DSN != "" {
		return usageError("give --db or --shard, not both")
	}
	if *f.def == "" {
		return usageError("--shard needs --shard-default")
	}
	cfg.Shards, cfg.ShardDefault = f.list.dsns, *f.def
	if *f.mapFile == "" {
		return nil
	}
	dir, err := shardmap.LoadMap(*f.mapFile, f.list.names)
	if err != nil {
		return err
	}
	if def, _ := dir.Default(context.Background()); def != *f.def {
		return fmt.Errorf("the shard map's default is %q, --shard-default %q", def, *f.def)
	}
	entries, _ := dir.List(context.Background())
	cfg.ShardMap = make(map[string]string, len(entries))
	for _, e := range entries {
		cfg.ShardMap[e.Tenant] = e.Shard
	}
	return nil
}
