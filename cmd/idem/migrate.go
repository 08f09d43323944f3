package main

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/idemstore"
)

// runMigrate implements "idem migrate --db DSN": it applies the embedded
// migrations of the driver the DSN selects. Safe to run while other
// instances start or serve: migrations are serialised in the database.
func runMigrate(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("migrate", "[--db DSN]", std)
	dsn := fs.db(defaultDB, "database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	if len(words) != 0 {
		return fs.usage(fmt.Sprintf("unexpected arguments %q", words))
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
