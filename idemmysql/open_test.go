package idemmysql

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/registry"
)

// TestParseDSN: a mysql:// URL and a go-sql-driver DSN name the same
// connection, and the settings the Store depends on replace the caller's.
func TestParseDSN(t *testing.T) {
	for _, tc := range []struct{ in, addr, user, pass, db, net string }{
		{"mysql://app:s%40cret@db.example:3307/idem?timeout=5s", "db.example:3307", "app", "s@cret", "idem", "tcp"},
		{"mysql://app@db.example/idem", "db.example:3306", "app", "", "idem", "tcp"},
		{"mysql://app@unix(/run/mysqld/mysqld.sock)/idem", "/run/mysqld/mysqld.sock", "app", "", "idem", "unix"},
		{"app:pw@tcp(127.0.0.1:3306)/idem?sql_mode=%27ANSI%27&time_zone=%27Europe%2FParis%27&clientFoundRows=false", "127.0.0.1:3306", "app", "pw", "idem", "tcp"},
	} {
		cfg, err := ParseDSN(tc.in)
		if err != nil {
			t.Errorf("ParseDSN(%q): %v", tc.in, err)
			continue
		}
		if cfg.Addr != tc.addr || cfg.User != tc.user || cfg.Passwd != tc.pass || cfg.DBName != tc.db || cfg.Net != tc.net {
			t.Errorf("ParseDSN(%q) = %s@%s(%s)/%s pw %q", tc.in, cfg.User, cfg.Net, cfg.Addr, cfg.DBName, cfg.Passwd)
		}
		if !cfg.ClientFoundRows || cfg.InterpolateParams || cfg.MultiStatements ||
			cfg.Params["time_zone"] != "'+00:00'" || !strings.Contains(cfg.Params["sql_mode"], "STRICT_ALL_TABLES") {
			t.Errorf("ParseDSN(%q): the Store's settings not applied: %+v", tc.in, cfg)
		}
	}
	if _, err := ParseDSN("mysql://app@db.example"); err == nil {
		t.Error("ParseDSN without a database: no error")
	}
}

// TestTranslate: a lost connection, a lock wait timeout and a deadlock
// wrap registry.ErrUnavailable; a duplicate key or a trigger's refusal is
// a storage error, never a key conflict or unavailability.
func TestTranslate(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unavailable bool
	}{
		{driver.ErrBadConn, true},
		{mysql.ErrInvalidConn, true},
		{fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: errLockWaitTimeout}), true},
		{&mysql.MySQLError{Number: errLockDeadlock}, true},
		{&mysql.MySQLError{Number: errConCount}, true},
		{&mysql.MySQLError{Number: errReadOnly}, true},
		{&mysql.MySQLError{Number: errDupEntry, Message: "Duplicate entry 'x' for key 'PRIMARY'"}, false},
		{&mysql.MySQLError{Number: 1644, Message: "idem: illegal state transition"}, false},
	} {
		got := translate(tc.err)
		if errors.Is(got, registry.ErrUnavailable) != tc.unavailable {
			t.Errorf("translate(%v) = %v, unavailable %v, want %v", tc.err, got, !tc.unavailable, tc.unavailable)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("translate(%v) lost the cause: %v", tc.err, got)
		}
	}
	if got := translate(sql.ErrNoRows); !errors.Is(got, registry.ErrNotFound) {
		t.Errorf("translate(ErrNoRows) = %v", got)
	}
	key, dup := duplicateKey(&mysql.MySQLError{Number: errDupEntry, Message: "Duplicate entry 'x' for key 'idem_operations.operation_id'"})
	if !dup || key != "operation_id" {
		t.Errorf("duplicateKey of a MySQL 8 message = %q %v", key, dup)
	}
}

// TestOpenDBChecksIsolation: OpenDB refuses a pool whose sessions run at
// REPEATABLE READ (the server's default), the level the driver's locking
// is not designed for, and accepts one prepared by Config and Isolation;
// migrating twice is a no-op.
func TestOpenDBChecksIsolation(t *testing.T) {
	t.Parallel()
	dsn := mytest.DSN(t)
	raw, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if s, err := OpenDB(t.Context(), raw, Options{}); err == nil || !strings.Contains(err.Error(), "READ-COMMITTED") {
		if s != nil {
			s.Close()
		}
		t.Errorf("OpenDB on a REPEATABLE READ pool: %v, want a refusal naming READ-COMMITTED", err)
	}
	cfg, err := ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	Isolation(cfg, true)
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	for range 2 {
		s, err := OpenDB(t.Context(), db, Options{})
		if err != nil {
			t.Fatalf("OpenDB on a prepared pool: %v", err)
		}
		s.Close()
	}
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded migrations: %v %v", files, err)
	}
	var n int64
	if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM idem_schema_migrations").Scan(&n); err != nil || n != int64(len(files)) {
		t.Errorf("migrations recorded: %d %v, want %d (each embedded one once)", n, err, len(files))
	}
}
