package idemsqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate applies the embedded migrations (migrations/*.sql, in file-name
// order) that db has not applied yet, each recorded in
// idem_schema_migrations under its file name without ".sql". All of them
// run in one BEGIN IMMEDIATE transaction on one connection, whatever db's
// _txlock setting, so processes that start at once queue on SQLite's write
// lock (for up to db's busy timeout) and the later ones find the work
// done. Either every pending migration is applied or none is. ctx governs
// the whole migration.
func Migrate(ctx context.Context, db *sql.DB) error {
	return migrate(ctx, db, nil)
}

// migrate is Migrate with the "now" argument that stamps applied_at.
func migrate(ctx context.Context, db *sql.DB, now any) (err error) {
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("idemsqlite: migrate: %w", err)
	}
	slices.Sort(files)

	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("idemsqlite: migrate: %w", translate(err))
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("idemsqlite: migrate: begin: %w", translate(err))
	}
	defer func() {
		if err == nil {
			return
		}
		// ctx may be done; the rollback must still run. If it fails the
		// connection may be left inside the transaction: drop it.
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()

	if _, err := conn.ExecContext(ctx, queries.Get("CreateMigrationsTable")); err != nil {
		return fmt.Errorf("idemsqlite: migrate: %w", translate(err))
	}
	for _, f := range files {
		version := strings.TrimSuffix(path.Base(f), ".sql")
		var n int64
		if err := conn.QueryRowContext(ctx, queries.Get("MigrationApplied"), version).Scan(&n); err != nil {
			return fmt.Errorf("idemsqlite: migrate %s: %w", version, translate(err))
		}
		if n > 0 {
			continue
		}
		ddl, err := fs.ReadFile(migrationFiles, f)
		if err != nil {
			return fmt.Errorf("idemsqlite: migrate %s: %w", version, err)
		}
		if _, err := conn.ExecContext(ctx, string(ddl)); err != nil {
			return fmt.Errorf("idemsqlite: migrate %s: %w", version, translate(err))
		}
		if _, err := conn.ExecContext(ctx, queries.Get("RecordMigration"), now, version); err != nil {
			return fmt.Errorf("idemsqlite: migrate %s: %w", version, translate(err))
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("idemsqlite: migrate: commit: %w", translate(err))
	}
	return nil
}
