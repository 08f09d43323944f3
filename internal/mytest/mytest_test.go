package mytest

import (
	"bufio"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// open connects to dsn, closed when t ends.
func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func queryString(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRowContext(t.Context(), q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s.String
}

// TestDatabasesAreSeparate: parallel tests each get a database of their
// own, connected to by the DSN they are given, on 127.0.0.1, and what one
// creates the other does not see.
func TestDatabasesAreSeparate(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string]string{}
	)
	for i := range 4 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			dsn := DSN(t)
			if !strings.HasPrefix(dsn, "root@tcp(127.0.0.1:") {
				t.Errorf("DSN %q: want root@tcp(127.0.0.1:PORT)/DB", dsn)
			}
			db := open(t, dsn)
			name := queryString(t, db, "SELECT DATABASE()")
			if !strings.HasPrefix(name, "t_") || !strings.HasSuffix(dsn, "/"+name) {
				t.Errorf("connected to database %q with DSN %q", name, dsn)
			}
			mu.Lock()
			if other, ok := seen[name]; ok {
				t.Errorf("database %q handed to %s and %s", name, other, t.Name())
			}
			seen[name] = t.Name()
			mu.Unlock()
			if _, err := db.ExecContext(t.Context(), "CREATE TABLE mine (v INT) ENGINE=InnoDB"); err != nil {
				t.Fatal(err)
			}
			if n := queryString(t, db, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"); n != "1" {
				t.Errorf("database %s holds %s tables, want only its own", name, n)
			}
		})
	}
}

// TestServerSettings: the shared server runs with the durable settings
// the package documents, as the mysql OS user when the tests run as root,
// and listens on its unix socket too.
func TestServerSettings(t *testing.T) {
	db := open(t, DSN(t))
	for v, want := range map[string]string{
		"@@innodb_flush_log_at_trx_commit": "1",
		"@@log_bin":                        "0",
		"@@bind_address":                   "127.0.0.1",
		"@@character_set_server":           "utf8mb4",
		"@@default_storage_engine":         "InnoDB",
	} {
		if got := queryString(t, db, "SELECT "+v); got != want {
			t.Errorf("%s = %q, want %q", v, got, want)
		}
	}
	s := shared.s
	sock := filepath.Join(s.dir, socketName)
	if got := queryString(t, db, "SELECT @@socket"); got != sock {
		t.Errorf("@@socket = %q, want %q", got, sock)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(filepath.Join(s.dir, "data", "ibdata1"))
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != s.cred.Uid {
			t.Errorf("ibdata1 owned by uid %d, want the mysql user's %d", uid, s.cred.Uid)
		}
	}
}

// TestStartPrivate: Start runs a server of the test's own with the given
// options, which win over the package's, and stops it and deletes its
// directory when the test ends.
func TestStartPrivate(t *testing.T) {
	var dir string
	t.Run("server", func(t *testing.T) {
		db := open(t, Start(t, "--innodb-flush-log-at-trx-commit=2"))
		if got := queryString(t, db, "SELECT @@innodb_flush_log_at_trx_commit"); got != "2" {
			t.Errorf("@@innodb_flush_log_at_trx_commit = %q, want the option's 2", got)
		}
		private.mu.Lock()
		for s := range private.s {
			dir = s.dir
		}
		private.mu.Unlock()
		if dir == "" {
			t.Fatal("no private server recorded")
		}
		t.Cleanup(func() { db.Close() }) // before the server stops
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("private server directory %s still there after its test: %v", dir, err)
	}
}

// reapChildEnv makes TestReapChild start a server, print it and hang.
const reapChildEnv = "MYTEST_REAP_CHILD"

// TestReapChild is the victim of TestReapStale, run in a child process.
func TestReapChild(t *testing.T) {
	if os.Getenv(reapChildEnv) == "" {
		t.Skip("runs only as the child of TestReapStale")
	}
	s, err := startServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s %d\n", s.dir, s.cmd.Process.Pid)
	select {}
}

// TestReapStale kills a test binary that owns a running server with
// SIGKILL, checks that its server outlived it, and that reapStale kills
// that server and deletes its directory while this process's server
// stays.
func TestReapStale(t *testing.T) {
	DSN(t) // skips or fails like every MariaDB test when the binaries are missing
	child := exec.Command(os.Args[0], "-test.run=^TestReapChild$", "-test.count=1")
	child.Env = append(os.Environ(), reapChildEnv+"=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child printed nothing: %v", err)
	}
	var dir string
	var pid int
	if _, err := fmt.Sscanf(line, "%s %d", &dir, &pid); err != nil {
		t.Fatalf("child line %q: %v", line, err)
	}
	child.Process.Kill()
	child.Wait()
	if !serves(pid, dir) {
		t.Fatalf("the child's server %d (%s) died with the child; nothing to reap", pid, dir)
	}
	reaped := reapStale(filepath.Dir(dir))
	found := false
	for _, d := range reaped {
		found = found || d == dir
		if d == shared.s.dir {
			t.Errorf("reaped this process's live server %s", d)
		}
	}
	if !found {
		t.Errorf("reapStale removed %v, not the dead child's %s", reaped, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s still there: %v", dir, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for serves(pid, dir) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if serves(pid, dir) {
		t.Errorf("server %d still running", pid)
	}
	if err := shared.s.db.PingContext(t.Context()); err != nil {
		t.Errorf("this process's server stopped answering: %v", err)
	}
}

func TestDBName(t *testing.T) {
	long := strings.Repeat("X/", 60)
	for _, tc := range []struct {
		test string
		n    uint64
		want string
	}{
		{"TestFoo/bar-baz", 3, "t_testfoo_bar_baz_3"},
		{long, 12, "t_" + strings.Repeat("x_", 30)[:maxIdentLen-2-3] + "_12"},
	} {
		got := dbName(tc.test, tc.n)
		if got != tc.want || len(got) > maxIdentLen {
			t.Errorf("dbName(%q, %d) = %q (%d bytes), want %q", tc.test, tc.n, got, len(got), tc.want)
		}
	}
}

// TestDatabaseDropped: the database DSN hands a test is dropped when the
// test ends, while the server goes on serving the others.
func TestDatabaseDropped(t *testing.T) {
	var name string
	t.Run("owner", func(t *testing.T) {
		name = queryString(t, open(t, DSN(t)), "SELECT DATABASE()")
	})
	admin := Admin(t, DSN(t))
	var n int
	if err := admin.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if name == "" || n != 0 {
		t.Errorf("database %q still exists after its test (%d rows)", name, n)
	}
}
