package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
	_ "modernc.org/sqlite"
)

// TestMain starts PostgreSQL and MariaDB on demand and stops them after
// the tests.
func TestMain(m *testing.M) { pgtest.Main(mytest.Runner{M: m}) }

// tableCount counts the idem tables in a database through database/sql.
func sqliteTables(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('idem_operations', 'idem_outbox')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	for range 2 { // migrating twice is a no-op the second time
		code, out, stderr := runCmd(t, "", "migrate", "--db", "sqlite:"+path)
		if code != exitOK || !strings.Contains(out, "migrated sqlite") {
			t.Fatalf("code %d, out %q, stderr %q", code, out, stderr)
		}
	}
	if n := sqliteTables(t, path); n != 2 {
		t.Fatalf("found %d idem tables, want 2", n)
	}
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	for range 2 {
		code, out, stderr := runCmd(t, "", "migrate", "--db", dsn)
		if code != exitOK || !strings.Contains(out, "migrated postgres") {
			t.Fatalf("code %d, out %q, stderr %q", code, out, stderr)
		}
	}
}

func TestMigrateBadDSN(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCmd(t, "", "migrate", "--db", "mysql://user:secret@host/db")
	if code != exitRefused || strings.Contains(stderr, "secret") {
		t.Fatalf("code %d, stderr %q (must fail and never print the password)", code, stderr)
	}
}
