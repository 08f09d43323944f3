// Package mytest gives Go tests a real, throwaway MariaDB (or MySQL)
// server, the way internal/pgtest gives them PostgreSQL.
//
// Each test binary that uses the package must call [Main] from its TestMain:
//
//	func TestMain(m *testing.M) { mytest.Main(m) }
//
// The first call to [DSN] in the test binary starts one shared server
// (lazily, exactly once); every call to DSN then creates a fresh, empty
// database for the calling test and drops it when the test finishes, so
// tests — including parallel ones — never see each other's data. [Start]
// starts a private server with extra server options instead, for the few
// tests that must change global settings.
//
// The server is built with mariadb-install-db and run as mariadbd, found on
// PATH or in /usr/bin and /usr/sbin (MariaDB 10.11 from Debian's
// mariadb-server package is expected; mysql_install_db and mysqld are
// accepted in their place). Defaults:
//
//   - data directory, error log and unix socket live in a fresh directory
//     under [os.TempDir] named idem-mytest-*, removed by Main;
//   - the server listens only on 127.0.0.1, on a free port chosen at start,
//     and on the unix socket mysqld.sock in that directory;
//   - user root without a password, no TLS; no option file is read
//     (--no-defaults), so a machine's my.cnf cannot change the setup;
//   - InnoDB, utf8mb4, innodb_flush_log_at_trx_commit=1, binary log off,
//     max_connections=400, innodb_buffer_pool_size=128M.
//
// When the tests run as root, the server runs as the "mysql" OS user,
// which must exist (mariadbd refuses to run as root without --user).
//
// If the binaries are missing, DSN skips the test, unless the environment
// variable IDEM_REQUIRE_MARIADB=1 is set, in which case it fails it.
//
// If the test binary is killed before Main returns, the server and its
// directory outlive it. The next server started on the machine reaps them:
// each directory records its owner's process ID (owner.pid), and a server
// whose owner no longer exists is killed and its directory deleted
// (reap.go).
package mytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// RequireEnv is the environment variable that turns a missing MariaDB
// installation from a skip into a test failure when set to "1".
const RequireEnv = "IDEM_REQUIRE_MARIADB"

// maxIdentLen is MariaDB's database name length limit.
const maxIdentLen = 64

var (
	mainCalled atomic.Bool   // set by Main; DSN refuses to run without it
	dbCounter  atomic.Uint64 // makes database names unique within the binary

	shared struct {
		once sync.Once
		s    *server // the running shared server, set by once
		err  error   // why it is not available, set by once
	}

	// private holds the servers Start started that are still running,
	// so that Main stops them even if a test's cleanup did not run.
	private struct {
		mu sync.Mutex
		s  map[*server]bool
	}
)

// errStopped is recorded if Main finishes before any test asked for a DSN,
// so that nothing can start a server that would never be stopped.
var errStopped = errors.New("mytest: server requested after mytest.Main finished")

// Main runs the tests, then stops every server the package started and
// deletes their directories, and exits with the tests' exit code (1 if a
// server could not be stopped). Call it from TestMain; it does not return.
func Main(m interface{ Run() int }) { os.Exit(runTests(m)) }

// Runner runs M's tests as Main does — stopping the servers after them
// — but returns the exit code instead of exiting, so that a test binary
// needing PostgreSQL too can pass it to pgtest.Main:
//
//	func TestMain(m *testing.M) { pgtest.Main(mytest.Runner{M: m}) }
type Runner struct{ M interface{ Run() int } }

// Run runs the tests and stops the servers; it returns the exit code.
func (r Runner) Run() int { return runTests(r.M) }

// runTests is Main without the exit.
func runTests(m interface{ Run() int }) int {
	mainCalled.Store(true)
	code := m.Run()
	shared.once.Do(func() { shared.err = errStopped })
	servers := []*server{shared.s}
	private.mu.Lock()
	for s := range private.s {
		servers = append(servers, s)
	}
	private.mu.Unlock()
	for _, s := range servers {
		if s == nil {
			continue
		}
		if err := s.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	removeTemplate()
	return code
}

// DSN returns the connection string, in the form of
// github.com/go-sql-driver/mysql, of a new, empty database that belongs to
// t alone, starting the shared server first if needed. The database is
// dropped by a t.Cleanup. The result has the form
//
//	root@tcp(127.0.0.1:PORT)/t_<test name>_<n>
//
// DSN is safe for concurrent use by parallel tests. Like t.Fatal, it must be
// called from the goroutine running the test. It skips or fails t when
// MariaDB is not installed (see the package documentation) and fails t,
// with the error log's tail, if the server cannot be started.
func DSN(t testing.TB) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("mytest: call mytest.Main(m) from TestMain so the server is stopped after the tests")
	}
	shared.once.Do(func() { shared.s, shared.err = startServer(nil) })
	return database(t, shared.s, shared.err)
}

// Start starts a private server for t alone with the extra mariadbd
// options opts ("--name=value", …, after the package's own, so they win)
// and returns the DSN of a fresh database on it; the server is stopped
// and its directory deleted when t ends. It costs a server start (a copy
// of a template data directory and a few seconds): use DSN unless the test
// must change what every connection of the server sees.
func Start(t testing.TB, opts ...string) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("mytest: call mytest.Main(m) from TestMain so the server is stopped after the tests")
	}
	s, err := startServer(opts)
	if err == nil {
		private.mu.Lock()
		if private.s == nil {
			private.s = map[*server]bool{}
		}
		private.s[s] = true
		private.mu.Unlock()
		t.Cleanup(func() {
			private.mu.Lock()
			delete(private.s, s)
			private.mu.Unlock()
			if err := s.stop(); err != nil {
				t.Error(err)
			}
		})
	}
	return database(t, s, err)
}

// database creates a fresh database for t on s (or skips or fails t with
// err) and returns its DSN.
func database(t testing.TB, s *server, err error) string {
	t.Helper()
	switch {
	case errors.Is(err, errNoBinaries) && os.Getenv(RequireEnv) != "1":
		t.Skip(err)
	case err != nil:
		t.Fatal(err)
	}
	name := dbName(t.Name(), dbCounter.Add(1))
	if err := s.admin(context.Background(), "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.admin(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Error(err)
		}
	})
	return s.dsn(name)
}

// Admin opens a connection pool to dsn's server as root without a
// database selected, for tests that inspect or change server state; it is
// closed when t ends.
func Admin(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	i := strings.Index(dsn, "/")
	if i < 0 {
		t.Fatalf("mytest: DSN %q has no database part", dsn)
	}
	db, err := sql.Open("mysql", dsn[:i+1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// dbName builds a database name of the form t_<sanitised test name>_<n>,
// truncating the test name to fit 64 characters.
func dbName(test string, n uint64) string {
	suffix := "_" + strconv.FormatUint(n, 10)
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len() >= maxIdentLen-len(suffix) {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + suffix
}

// URL is DSN in the form idemstore.Open and the idem command's --db take:
// mysql://root@127.0.0.1:PORT/t_<test name>_<n>, a new, empty database
// that belongs to t alone, dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	return AsURL(t, DSN(t))
}

// AsURL turns a DSN of the form DSN and Start return into its mysql://
// URL; it fails t on any other form.
func AsURL(t testing.TB, dsn string) string {
	t.Helper()
	user, rest, ok1 := strings.Cut(dsn, "@tcp(")
	addr, db, ok2 := strings.Cut(rest, ")/")
	if !ok1 || !ok2 {
		t.Fatalf("mytest: DSN %q is not of the form USER@tcp(ADDR)/DB", dsn)
	}
	return "mysql://" + user + "@" + addr + "/" + db
}
