package idemmysql

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrateLock names the advisory lock (GET_LOCK) that serialises
// migrations of one server, and migrateWait bounds the wait for it, in
// seconds.
const (
	migrateLock = "idem_migrate"
	migrateWait = 60
)

// Migrate applies the embedded migrations (migrations/*.sql, in file-name
// order) that db has not applied yet, each recorded in
// idem_schema_migrations under its file name without ".sql". Processes
// that start at once queue on an advisory lock (GET_LOCK, up to 60 s) held
// on one connection, and the later ones find the work done.
//
// MySQL commits DDL implicitly: a migration is not atomic. One that fails
// half-way leaves the statements before the failure applied and is not
// recorded; fix the cause and drop what it created before trying again.
// A file is run statement by statement (statements): a statement ends
// at a line that starts in its first column and ends with ";", so the
// indented statements of a trigger body stay inside it, with no
// DELIMITER. ctx governs the whole migration.
func Migrate(ctx context.Context, db *sql.DB) error {
	return migrate(ctx, db, nil)
}

// migrate is Migrate with the "now" argument that stamps applied_at.
func migrate(ctx context.Context, db *sql.DB, now any) (err error) {
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("idemmysql: migrate: %w", err)
	}
	slices.Sort(files)
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("idemmysql: migrate: %w", translate(err))
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", migrateLock, migrateWait).Scan(&got); err != nil {
		return fmt.Errorf("idemmysql: migrate: lock: %w", translate(err))
	}
	if got.Int64 != 1 {
		return fmt.Errorf("idemmysql: migrate: another process held the migration lock for %d s", migrateWait)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", migrateLock) //nolint:errcheck // closing the connection releases it too

	if _, err := exec(ctx, conn, queries.Get("CreateMigrationsTable")); err != nil {
		return fmt.Errorf("idemmysql: migrate: %w", translate(err))
	}
	for _, f := range files {
		version := strings.TrimSuffix(path.Base(f), ".sql")
		var n int64
		if err := queryRow(ctx, conn, queries.Get("MigrationApplied"), version).Scan(&n); err != nil {
			return fmt.Errorf("idemmysql: migrate %s: %w", version, translate(err))
		}
		if n > 0 {
			continue
		}
		ddl, err := fs.ReadFile(migrationFiles, f)
		if err != nil {
			return fmt.Errorf("idemmysql: migrate %s: %w", version, err)
		}
		for _, stmt := range statements(string(ddl)) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("idemmysql: migrate %s: %w\n%s", version, translate(err), stmt)
			}
		}
		if _, err := exec(ctx, conn, queries.Get("RecordMigration"), now, version); err != nil {
			return fmt.Errorf("idemmysql: migrate %s: %w", version, translate(err))
		}
	}
	return nil
}

// statements splits a migration into its statements: each ends at a line
// that starts in the first column and ends with ";" (the ";" dropped).
// Lines that are only a comment, outside a statement, are dropped.
func statements(ddl string) []string {
	var (
		out []string
		cur strings.Builder
	)
	for line := range strings.Lines(ddl) {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		cur.WriteString(line)
		if line[0] != ' ' && line[0] != '\t' && strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}
