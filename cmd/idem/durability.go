package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/registry"
)

// warnDurability logs a warning for every setting of a PostgreSQL store
// that can lose an acknowledged outcome at a crash or failover
// (idempg.Durability.Warnings). It never stops the server: the check is
// advice, and a role may not see every standby. SQLite has no standbys.
func warnDurability(ctx context.Context, log *slog.Logger, store registry.Store) {
	pg, ok := store.(*idempg.Store)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := pg.Durability(ctx)
	if err != nil {
		log.Warn("could not read the database's durability settings", "err", err)
		return
	}
	for _, w := range d.Warnings() {
		log.Warn(w)
	}
}
