package idempg

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrate connects to the database named by dsn with a single connection
// and applies the embedded migrations not yet applied, then disconnects;
// it is what `idem migrate` runs. Open does the same on its own pool, so
// calling Migrate first is never required. ctx governs the whole call.
//
// Migrations are the files migrations/*.sql, applied in file-name order,
// each recorded by its name without ".sql" in idem_schema_migrations. All
// pending ones are applied in one transaction that first takes a
// transaction-level advisory lock, so any number of processes may migrate
// the same database at once: one applies, the others wait and then find
// nothing left to do. A failure rolls everything back.
func Migrate(ctx context.Context, dsn string) error {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("idempg: %w", err)
	}
	if err := applyPooler(cfg, &Options{}); err != nil { // idem_pooler, as Open reads it
		return err
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("idempg: %w", translate(err))
	}
	defer pool.Close()
	return migrate(ctx, pool)
}

// migrate applies the pending migrations on pool; see Migrate.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("idempg: migrations: %w", err)
	}
	// fs.Glob returns names in lexical order, which is file-name order.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, queries.Get("LockMigrations")); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queries.Get("CreateMigrationsTable")); err != nil {
			return err
		}
		for _, f := range files {
			version := strings.TrimSuffix(path.Base(f), ".sql")
			var applied bool
			if err := tx.QueryRow(ctx, queries.Get("MigrationApplied"), version).Scan(&applied); err != nil {
				return err
			}
			if applied {
				continue
			}
			ddl, err := fs.ReadFile(migrationFS, f)
			if err != nil {
				return err
			}
			// No arguments: pgx sends it with the simple protocol, which
			// accepts a file of several statements.
			if _, err := tx.Exec(ctx, string(ddl)); err != nil {
				return fmt.Errorf("migration %s: %w", version, err)
			}
			if _, err := tx.Exec(ctx, queries.Get("RecordMigration"), version); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idempg: migrate: %w", translate(err))
	}
	return nil
}
