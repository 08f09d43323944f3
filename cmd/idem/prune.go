package main

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// runPrune implements "idem prune [--db DSN] [--batch N] [--once] [--json]"
// (SPEC E5, O2, docs/operations.md): it retires the expired terminal
// records of the registry into tombstones (their stored responses are
// dropped) and deletes the tombstones whose TombstoneTTL has elapsed, in
// batches of N (default 1000, each one transaction), until a batch finds
// less than N of either — or after one batch with --once. Records in
// flight (RESERVED, EXECUTING) and UNKNOWN records are never pruned: they
// need recovery or reconciliation first. The pass is recorded in the
// registry's prune runs (the console's status page shows them). It is safe to run while servers
// serve and prune themselves (idem serve --prune-interval): concurrent
// prunes take disjoint records and retries see a record whole or as a
// tombstone.
//
// Output: "retired N expired records, deleted M tombstones", or with
// --json one line {"retired":N,"deleted":M}. On a database error the
// counts done so far go to stderr with the error, and the exit code is 1.
func runPrune(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("prune", "[--db DSN] [--batch N] [--once] [--json]", std)
	dsn := fs.db(defaultDB, "registry database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	batch := fs.Int("batch", registry.DefaultPruneBatch, "records per batch (one transaction each)")
	once := fs.Bool("once", false, "run one batch only")
	asJSON := fs.Bool("json", false, `print {"retired":N,"deleted":M}`)
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 || *batch <= 0 {
		return fs.usage("no arguments but flags, and --batch N positive")
	}
	store, err := idemstore.Open(ctx, *dsn, idemstore.Options{})
	if err != nil {
		fmt.Fprintln(std.err, "idem prune:", printable(err.Error()))
		return exitRefused
	}
	defer store.Close()
	var res registry.PruneResult
	if *once {
		res, err = registry.PruneRecorded(ctx, store, "idem prune --once", func() (registry.PruneResult, error) { return store.Prune(ctx, *batch) })
	} else {
		res, err = registry.PruneAllRecorded(ctx, store, *batch, "idem prune")
	}
	if err != nil {
		fmt.Fprintf(std.err, "idem prune: %s (retired %d, deleted %d before the error)\n", printable(err.Error()), res.Retired, res.Deleted)
		return exitRefused
	}
	if *asJSON {
		if err := printJSON(std.out, res); err != nil {
			fmt.Fprintln(std.err, "idem prune:", printable(err.Error()))
			return exitRefused
		}
		return exitOK
	}
	fmt.Fprintf(std.out, "retired %d expired records, deleted %d tombstones\n", res.Retired, res.Deleted)
	return exitOK
}
