package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemkit/idem/registry"
)

// The library's error type is what errors.go recognises.
var _ coder = (*sqlite.Error)(nil)

func TestResultCodesMatchLibrary(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, lib int
	}{
		{"SQLITE_BUSY", codeBusy, sqlite3.SQLITE_BUSY},
		{"SQLITE_LOCKED", codeLocked, sqlite3.SQLITE_LOCKED},
		{"SQLITE_CANTOPEN", codeCantOpen, sqlite3.SQLITE_CANTOPEN},
		{"SQLITE_CONSTRAINT_PRIMARYKEY", codeConstraintPrimaryKey, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY},
		{"SQLITE_CONSTRAINT_UNIQUE", codeConstraintUnique, sqlite3.SQLITE_CONSTRAINT_UNIQUE},
	} {
		if c.ours != c.lib {
			t.Errorf("%s = %d here, %d in modernc.org/sqlite/lib", c.name, c.ours, c.lib)
		}
	}
}

func TestDriverDSN(t *testing.T) {
	for _, dsn := range []string{"sqlite:/tmp/a.db", "/tmp/a.db", "sqlite:/tmp/a.db?_pragma=cache_size(-2000)&_txlock=deferred&_pragma=journal_mode(DELETE)"} {
		got, err := driverDSN(dsn)
		if err != nil {
			t.Fatalf("%q: %v", dsn, err)
		}
		p, rawQuery, _ := strings.Cut(got, "?")
		q, err := url.ParseQuery(rawQuery)
		if err != nil || p != "/tmp/a.db" {
			t.Fatalf("%q -> %q: path %q, err %v", dsn, got, p, err)
		}
		pragmas := q["_pragma"]
		for _, want := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "synchronous(FULL)", "foreign_keys(1)"} {
			if !slices.Contains(pragmas, want) {
				t.Errorf("%q -> %q lacks _pragma=%s", dsn, got, want)
			}
		}
		if slices.Contains(pragmas, "journal_mode(DELETE)") || q["_txlock"][0] != "immediate" || len(q["_txlock"]) != 1 {
			t.Errorf("%q -> %q: the caller's settings were not replaced", dsn, got)
		}
		if strings.Contains(dsn, "cache_size") && !slices.Contains(pragmas, "cache_size(-2000)") {
			t.Errorf("%q -> %q dropped an unrelated pragma", dsn, got)
		}
	}
	for _, dsn := range []string{"", "sqlite:", "sqlite::memory:", ":memory:", "file:x?mode=memory", "sqlite:x.db?%zz"} {
		if got, err := driverDSN(dsn); err == nil {
			t.Errorf("%q accepted as %q", dsn, got)
		}
	}
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	const n = 8
	var wg sync.WaitGroup
	stores := make([]*Store, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), path, Options{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var versions int
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil || len(files) < 7 {
		t.Fatalf("embedded migrations %v (%v)", files, err)
	}
	if err := stores[0].DB().QueryRow(`SELECT count(*) FROM idem_schema_migrations`).Scan(&versions); err != nil || versions != len(files) {
		t.Errorf("%d migration rows (%v), want %d", versions, err, len(files))
	}
	if err := Migrate(t.Context(), stores[0].DB()); err != nil {
		t.Errorf("Migrate again: %v", err)
	}
	for _, p := range []struct{ pragma, want string }{
		{"journal_mode", "wal"}, {"busy_timeout", "10000"}, {"synchronous", "2"}, {"foreign_keys", "1"},
	} {
		var got string
		if err := stores[0].DB().QueryRow(`PRAGMA ` + p.pragma).Scan(&got); err != nil || got != p.want {
			t.Errorf("PRAGMA %s = %q (%v), want %s", p.pragma, got, err, p.want)
		}
	}
}

func TestOpenDBLeavesDBOpen(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "own.db")+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := OpenDB(t.Context(), db, Options{})
	if err != nil {
		t.Fatalf("OpenDB: %v", err)
	}
	s.Close()
	s.Close() // idempotent
	if err := db.PingContext(t.Context()); err != nil {
		t.Errorf("db closed by Store.Close: %v", err)
	}
	if _, _, err := s.Reserve(t.Context(), newClaim("closed")); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("Reserve after Close: %v, want ErrUnavailable", err)
	}
}

// A writer that cannot get the lock within the busy timeout is reported
// as unavailable, not as a conflict or a missing record.
func TestBusyIsUnavailable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	owner, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(20)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := OpenDB(t.Context(), db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := owner.DB().BeginTx(t.Context(), nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	_, _, err = s.Reserve(t.Context(), newClaim("busy"))
	if !errors.Is(err, registry.ErrUnavailable) || sqliteCode(err)&0xff != codeBusy {
		t.Errorf("Reserve under a held write lock: %v, want ErrUnavailable wrapping SQLITE_BUSY", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 0)
	defer cancel()
	if _, err := s.Get(ctx, newClaim("x").Scope); !errors.Is(err, registry.ErrUnavailable) &&
		!errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with an expired context: %v", err)
	}
}

func TestTranslate(t *testing.T) {
	if !errors.Is(translate(sql.ErrNoRows), registry.ErrNotFound) {
		t.Errorf("sql.ErrNoRows not translated to ErrNotFound")
	}
	if err := translate(sql.ErrConnDone); !errors.Is(err, registry.ErrUnavailable) || !errors.Is(err, sql.ErrConnDone) {
		t.Errorf("sql.ErrConnDone: %v", err)
	}
	if err := translate(context.DeadlineExceeded); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("deadline: %v", err)
	}
	other := errors.New("boom")
	if translate(other) != other || translate(nil) != nil {
		t.Errorf("an unknown error was changed")
	}
}

// migrateBefore applies, on an empty database, the embedded migrations
// whose versions sort before version ("007": 001 to 006) and records them
// as applied, as Open would have: the starting point of an upgrade test.
func migrateBefore(t *testing.T, db *sql.DB, version string) {
	t.Helper()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, queries.Get("CreateMigrationsTable")); err != nil {
		t.Fatal(err)
	}
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	for _, f := range files {
		v := strings.TrimSuffix(path.Base(f), ".sql")
		if v >= version {
			break
		}
		ddl, err := fs.ReadFile(migrationFiles, f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, string(ddl)); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if _, err := db.ExecContext(ctx, queries.Get("RecordMigration"), 1, v); err != nil {
			t.Fatal(err)
		}
	}
}
