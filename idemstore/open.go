// Package idemstore opens a registry store from a DSN, choosing the driver by
// its scheme: "postgres://…" or "postgresql://…" for idempg, "sqlite:PATH"
// for idemsqlite, "mysql://…" for idemmysql (MySQL or MariaDB). It is the one place that knows every driver; libraries
// that want a single driver import it directly instead.
package idemstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/registry"
)

// Options apply to whichever driver the DSN selects.
type Options struct {
	// Now replaces database time when set (tests); nil means database time.
	Now func() time.Time
	// Sealer, when set, encrypts the bodies the store keeps at rest (the
	// drivers' Options.Sealer; package keyring); nil keeps them in
	// plaintext.
	Sealer registry.Sealer
}

// Open opens the store named by dsn and applies its migrations. ctx
// governs opening and migrating only.
func Open(ctx context.Context, dsn string, opts Options) (registry.Store, error) {
	switch Kind(dsn) {
	case "postgres":
		return idempg.Open(ctx, dsn, idempg.Options{Now: opts.Now, Sealer: opts.Sealer})
	case "sqlite":
		return idemsqlite.Open(ctx, dsn, idemsqlite.Options{Now: opts.Now, Sealer: opts.Sealer})
	case "mysql":
		return idemmysql.Open(ctx, dsn, idemmysql.Options{Now: opts.Now, Sealer: opts.Sealer})
	}
	return nil, fmt.Errorf("idemstore: unknown database %q: want postgres://…, mysql://… or sqlite:PATH", redact(dsn))
}

// Kind returns "postgres", "sqlite", "mysql" or "" for a DSN.
func Kind(dsn string) string {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "postgres"
	case strings.HasPrefix(dsn, "sqlite:"):
		return "sqlite"
	case strings.HasPrefix(dsn, "mysql://"):
		return "mysql"
	}
	return ""
}

// redact cuts a DSN to its scheme so errors never print passwords.
func redact(dsn string) string {
	if i := strings.Index(dsn, ":"); i >= 0 {
		return dsn[:i] + ":…"
	}
	return "…"
}
