package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/idemkit/idem/idemstore"
)

// runMigrate implements "idem migrate --db DSN": it applies the embedded
// migrations of the driver the DSN selects. Safe to run while other
// instances start or serve: migrations are serialised in the database.
func runMigrate(ctx context.Context, args []string, std stdio) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(std.err)
	dsn := fs.String("db", defaultDB, "database `DSN`: sqlite:PATH or postgres://…")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return exitUsage
	}
	store, err := idemstore.Open(ctx, *dsn, idemstore.Options{})
	if err != nil {
		fmt.Fprintln(std.err, "idem migrate:", err)
		return exitRefused
	}
	store.Close()
	fmt.Fprintf(std.out, "migrated %s database\n", idemstore.Kind(*dsn))
	return exitOK
}
