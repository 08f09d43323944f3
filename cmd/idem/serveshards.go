package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard"
	"github.com/idemkit/idem/shard/shardmap"
)

// shardList is the repeatable --shard NAME=DSN, in the order given.
type shardList struct {
	names []string
	dsns  map[string]string
}

func (l *shardList) String() string { return strings.Join(l.names, ",") }

// Set implements flag.Value.
func (l *shardList) Set(v string) error {
	name, dsn, ok := strings.Cut(v, "=")
	switch {
	case !ok || dsn == "":
		return fmt.Errorf("want NAME=DSN, got %q", redactedShard(v))
	case !shardmap.ValidShardName(name):
		return fmt.Errorf("shard name %q: 1 to %d letters, digits, - or _", name, shardmap.MaxShardName)
	case l.dsns[name] != "":
		return fmt.Errorf("shard %q given twice", name)
	case idemstore.Kind(dsn) != "postgres" && idemstore.Kind(dsn) != "sqlite":
		// The reference service's tenant copy (payments.CopyTenant) and
		// the directory are written for PostgreSQL and SQLite.
		return fmt.Errorf("shard %q: want postgres://… or sqlite:PATH", name)
	}
	if l.dsns == nil {
		l.dsns = make(map[string]string)
	}
	l.names = append(l.names, name)
	l.dsns[name] = dsn
	return nil
}

// redactedShard cuts a --shard value to its name so errors never print
// a password.
func redactedShard(v string) string {
	name, _, _ := strings.Cut(v, "=")
	return name + "=…"
}

// shardFlags are serve's shard flags (docs/operations.md, "Tenant-sharded
// registries").
type shardFlags struct {
	list                                *shardList
	def, mapFile, dirName, consoleShard *string
}

// addShardFlags registers --shard, --shard-default, --shard-map and
// --shard-directory on fs.
func addShardFlags(fs *flag.FlagSet) shardFlags {
	f := shardFlags{list: &shardList{}}
	fs.Var(f.list, "shard", "`NAME=DSN`, repeatable: a shard, the registry beside the business tables of the tenants the map sends to NAME; "+
		"with --shard, --db is not used")
	f.def = fs.String("shard-default", "", "the shard `NAME` of tenants the map does not name (required with --shard)")
	f.mapFile = fs.String("shard-map", "", "shard map `FILE`: {\"default\":\"NAME\",\"tenants\":{\"TENANT\":\"NAME\"}}; without it the map is the directory table of --shard-directory")
	f.consoleShard = fs.String("console-shard", "", "with --shard: the shard `NAME` whose console (--operators) the admin listener's root serves; every shard's is at /shards/NAME/ (default: --shard-default)")
	f.dirName = fs.String("shard-directory", "", "the PostgreSQL shard `NAME` whose idem_shard_directory table holds the map (default: --shard-default)")
	return f
}

// sharded reports whether --shard was given.
func (f shardFlags) sharded() bool { return len(f.list.names) > 0 }

// check reports a usage error of the shard flags; dbGiven says whether
// --db or --db-file was given.
func (f shardFlags) check(dbGiven bool) error {
	if !f.sharded() {
		if *f.def != "" || *f.mapFile != "" || *f.dirName != "" || *f.consoleShard != "" {
			return fmt.Errorf("--shard-default, --shard-map, --shard-directory and --console-shard need --shard")
		}
		return nil
	}
	switch {
	case dbGiven:
		return fmt.Errorf("give --db or --shard, not both")
	case *f.def == "":
		return fmt.Errorf("--shard needs --shard-default")
	case !slices.Contains(f.list.names, *f.def):
		return fmt.Errorf("--shard-default %q is not a --shard", *f.def)
	case *f.consoleShard != "" && !slices.Contains(f.list.names, *f.consoleShard):
		return fmt.Errorf("--console-shard %q is not a --shard", *f.consoleShard)
	case *f.mapFile != "" && *f.dirName != "":
		return fmt.Errorf("give --shard-map or --shard-directory, not both")
	}
	if *f.mapFile == "" {
		name := f.directoryShard()
		if !slices.Contains(f.list.names, name) {
			return fmt.Errorf("--shard-directory %q is not a --shard", name)
		}
		if idemstore.Kind(f.list.dsns[name]) != "postgres" {
			return fmt.Errorf("the directory shard %q must be PostgreSQL (or give --shard-map)", name)
		}
	}
	return nil
}

// consoleName is the shard the console shows.
func (f shardFlags) consoleName() string {
	if *f.consoleShard != "" {
		return *f.consoleShard
	}
	return *f.def
}

// directoryShard is the shard holding the directory table.
func (f shardFlags) directoryShard() string {
	if *f.dirName != "" {
		return *f.dirName
	}
	return *f.def
}

// directory returns the shard map: the --shard-map file, or the
// directory table of the directory shard (opened in stores), whose
// default is set to --shard-default if it has none; a table whose
// default differs is an error.
func (f shardFlags) directory(ctx context.Context, stores map[string]registry.Store) (shardmap.Directory, error) {
	if *f.mapFile != "" {
		d, err := shardmap.LoadMap(*f.mapFile, f.list.names)
		if err != nil {
			return nil, err
		}
		if def, _ := d.Default(ctx); def != *f.def {
			return nil, fmt.Errorf("the shard map's default is %q, --shard-default %q", def, *f.def)
		}
		return d, nil
	}
	pg, ok := stores[f.directoryShard()].(*idempg.Store)
	if !ok {
		return nil, fmt.Errorf("the directory shard %q is not PostgreSQL", f.directoryShard())
	}
	d := pg.ShardDirectory(f.list.names)
	def, err := d.InitDefault(ctx, *f.def, "idem serve")
	if err != nil {
		return nil, err
	}
	if def != *f.def {
		return nil, fmt.Errorf("the directory's default shard is %q, --shard-default %q", def, *f.def)
	}
	return d, nil
}

// shardedServer is "idem serve" over several shards.
type shardedServer struct {
	byName   map[string]*serveShard
	handler  http.Handler        // shard.Handler, with the health routes of every shard
	gatherer prometheus.Gatherer // reg and every shard's metrics, labelled shard=NAME
}

// openShards opens every shard (see openShard; migrations applied on
// each) and routes requests among them by the map f names.
func (s shardSetup) openShards(ctx context.Context, f shardFlags, reg *prometheus.Registry) (_ *shardedServer, stop func(), err error) {
	router := &shard.Router{Shards: make(map[string]registry.Store)}
	s.svc.Identity, s.svc.Admit = shard.RequestIdentity, router.Admit
	out := &shardedServer{byName: make(map[string]*serveShard)}
	var (
		stops  stopStack
		list   []*serveShard
		raw    = make(map[string]registry.Store)
		routes = make(map[string]http.Handler)
		gather = prometheus.Gatherers{reg}
	)
	defer func() {
		if err != nil {
			stops.stop()
		}
	}()
	for _, name := range f.list.names {
		one, stopOne, err := s.openShard(ctx, name, f.list.dsns[name], prometheus.NewRegistry())
		if err != nil {
			return nil, stops.stop, fmt.Errorf("shard %s: %w", name, err)
		}
		stops.push(stopOne)
		list = append(list, one)
		out.byName[name], raw[name], routes[name] = one, one.store, one.svc.Handler()
		router.Shards[name] = registry.WithTimeout(one.store, s.storeTimeout)
		gather = append(gather, shardGatherer{name: name, g: one.reg})
	}
	if router.Directory, err = f.directory(ctx, raw); err != nil {
		return nil, stops.stop, fmt.Errorf("the shard map: %w", err)
	}
	// Tenants left draining (a move half-way), for IdemTenantDrainingTooLong.
	reg.MustRegister(shardmap.NewCollector(router.Directory))
	probe := probeAll(list)
	route := &shard.Handler{Router: router, Identity: s.svc.Auth.Identity, Shards: routes, Public: out.byName[*f.def].svc.Handler()}
	// Not a ServeMux: it would redirect paths that are not clean, which
	// the service answers 404 itself (payments.Service.Handler).
	out.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") {
			probe.ServeHTTP(w, r)
			return
		}
		route.ServeHTTP(w, r)
	})
	out.gatherer = gather
	s.log.Info("serving shards", "shards", strings.Join(f.list.names, ","), "default", *f.def, "map", mapSource(f))
	return out, stops.stop, nil
}

// mapSource says where the shard map comes from, for the log.
func mapSource(f shardFlags) string {
	if *f.mapFile != "" {
		return "file " + *f.mapFile
	}
	return "directory table on shard " + f.directoryShard()
}
