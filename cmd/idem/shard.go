package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/registry"
	"github.com/idemkit/idem/shard"
	"github.com/idemkit/idem/shard/shardmap"
)

// runShard implements "idem shard" (docs/shards-move.md): the shard
// directory of a sharded service and tenant moves between its shards.
//
//	idem shard list --shard NAME=DSN … --shard-default NAME [--shard-directory NAME]
//
// prints the directory: the default shard and every tenant's entry.
//
//	idem shard move TENANT --to NAME --shard NAME=DSN … --shard-default NAME [--shard-directory NAME]
//	    [--settle D] [--reason TEXT] [--actor NAME] [--encryption-keys FILE]
//
// moves the tenant from the shard the directory names to --to
// (shard.Move): drain, wait for nothing in flight, fence the old shard,
// copy the tenant's records and the reference service's payments and
// refunds, switch the directory, undrain; one line per step. Stopped
// anywhere (a crash, ^C, a failed step), the same command resumes it.
//
//	idem shard abort TENANT --shard NAME=DSN … --shard-default NAME [--shard-directory NAME]
//
// undoes a move that has not switched: lifts the old shard's fence and
// undrains the tenant there.
//
// The directory is the idem_shard_directory table of the PostgreSQL
// shard --shard-directory (default --shard-default), as "idem serve"
// reads it. Exit codes: 0 done, 1 refused or failed (resume with the
// same command), 2 bad usage, 3 stale: the tenant's entry changed under
// the command (another move or abort) — read it with list and decide
// again.
func runShard(ctx context.Context, args []string, std stdio) int {
	if len(args) == 0 || isHelp(args[0]) {
		fs := newFlags("shard", "list | move TENANT --to NAME | abort TENANT  --shard NAME=DSN … --shard-default NAME", std)
		if len(args) == 0 {
			return fs.usage("an action is expected: list, move or abort")
		}
		fs.help(std.out)
		return exitOK
	}
	action := args[0]
	synopsis := map[string]string{
		"list":  "--shard NAME=DSN … --shard-default NAME [--shard-directory NAME]",
		"move":  "TENANT --to NAME --shard NAME=DSN … --shard-default NAME [--shard-directory NAME] [--settle D] [--reason TEXT] [--actor NAME]",
		"abort": "TENANT --shard NAME=DSN … --shard-default NAME [--shard-directory NAME] [--reason TEXT] [--actor NAME]",
	}[action]
	if synopsis == "" {
		return newFlags("shard", "list | move | abort", std).usage(fmt.Sprintf("unknown action %q: list, move or abort", action))
	}
	fs := newFlags("shard "+action, synopsis, std)
	sf := shardFlags{list: &shardList{}, mapFile: new(string), consoleShard: new(string)}
	fs.Var(sf.list, "shard", "`NAME=DSN`, repeatable: every shard of the service, as idem serve --shard names them")
	sf.def = fs.String("shard-default", "", "the shard `NAME` of tenants the directory does not name (required)")
	sf.dirName = fs.String("shard-directory", "", "the PostgreSQL shard `NAME` whose idem_shard_directory table holds the map (default: --shard-default)")
	keys := addKeysFlag(fs.FlagSet)
	to := fs.String("to", "", "with move: the shard `NAME` the tenant moves to")
	settle := fs.Duration("settle", shard.DefaultMoveSettle, "with move: how long to wait after the drain before counting what is in flight: at least the instances' directory refresh, 1s (`D`)")
	reason := fs.String("reason", "", "why (`TEXT`), written to the audit log")
	actor := fs.String("actor", defaultActor(), "who moves it (`NAME`; default $USER, else operator)")
	words, code, ok := fs.parse(args[1:])
	if !ok {
		return code
	}
	switch {
	case action == "list" && len(words) != 0, action != "list" && len(words) != 1:
		return fs.usage("unexpected arguments")
	case !sf.sharded():
		return fs.usage("--shard is required")
	case action == "move" && *to == "":
		return fs.usage("move needs --to")
	case *settle < shard.DefaultRefresh:
		return fs.usage(fmt.Sprintf("--settle %v is shorter than the servers' directory refresh (%v): a server could still admit the tenant's new keys", *settle, shard.DefaultRefresh))
	}
	if err := sf.check(false); err != nil {
		return fs.usage(err.Error())
	}
	stores, closeAll, err := openShardStores(ctx, sf, *keys)
	if err != nil {
		fmt.Fprintf(std.err, "idem shard %s: %s\n", action, printable(err.Error()))
		return exitRefused
	}
	defer closeAll()
	dir, err := sf.directory(ctx, stores)
	if err != nil {
		fmt.Fprintf(std.err, "idem shard %s: %s\n", action, printable(err.Error()))
		return exitRefused
	}
	if action == "list" {
		return printDirectory(ctx, dir, std)
	}
	start := time.Now()
	m := &shard.Move{Directory: dir, Shards: stores, Tenant: words[0], To: *to, Actor: *actor, Reason: *reason,
		Settle: *settle, Data: payments.CopyTenant,
		Progress: func(s shard.MoveStep) error {
			fmt.Fprintf(std.out, "%-8s %6.1fs  %s → %s: %s\n", s.Step, time.Since(start).Seconds(), s.From, s.To, printable(s.Note))
			// The fault suite's seams: a crash after each step.
			return failpoint.Hit("shard-" + s.Step)
		}}
	if action == "move" {
		err = m.Run(ctx)
	} else {
		err = m.Abort(ctx)
	}
	switch {
	case errors.Is(err, shardmap.ErrStale):
		fmt.Fprintf(std.err, "idem shard %s: STALE: %s\n", action, printable(err.Error()))
		return exitStale
	case err != nil:
		fmt.Fprintf(std.err, "idem shard %s: %s (run the same command again to resume)\n", action, printable(err.Error()))
		return exitRefused
	}
	return exitOK
}

// openShardStores opens every shard's store, unwrapped (a tenant move
// needs the driver's registry.TenantMover).
func openShardStores(ctx context.Context, sf shardFlags, keysPath string) (map[string]registry.Store, func(), error) {
	opts, err := storeOptions(keysPath)
	if err != nil {
		return nil, func() {}, err
	}
	stores := make(map[string]registry.Store)
	closeAll := func() {
		for _, st := range stores {
			st.Close()
		}
	}
	for _, name := range sf.list.names {
		st, err := idemstore.Open(ctx, sf.list.dsns[name], opts)
		if err != nil {
			closeAll()
			return nil, func() {}, fmt.Errorf("shard %s: %w", name, err)
		}
		stores[name] = st
	}
	return stores, closeAll, nil
}

// printDirectory writes the directory: its default, then every entry.
func printDirectory(ctx context.Context, dir shardmap.Directory, std stdio) int {
	def, err := dir.Default(ctx)
	if err != nil {
		fmt.Fprintf(std.err, "idem shard list: %s\n", printable(err.Error()))
		return exitRefused
	}
	entries, err := dir.List(ctx)
	if err != nil {
		fmt.Fprintf(std.err, "idem shard list: %s\n", printable(err.Error()))
		return exitRefused
	}
	fmt.Fprintf(std.out, "default shard: %s\n", def)
	tw := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSHARD\tDRAINING\tVERSION\tUPDATED\tBY")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%d\t%s\t%s\n", printable(e.Tenant), e.Shard, e.Draining, e.Version,
			e.UpdatedAt.UTC().Format(time.RFC3339), printable(e.UpdatedBy))
	}
	tw.Flush()
	return exitOK
}
