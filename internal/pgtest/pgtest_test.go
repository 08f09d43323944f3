package pgtest_test

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// psqlPath returns the psql of the installation that provides initdb.
func psqlPath(t *testing.T) string {
	t.Helper()
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(initdb)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(real), "psql")
}

// psql runs sql against dsn and returns its trimmed, unaligned output.
func psql(t *testing.T, dsn, sql string) string {
	t.Helper()
	out, err := exec.Command(psqlPath(t), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v\n%s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

// checkDSN verifies the shape of dsn and that it connects to the database it
// names, and returns that name.
func checkDSN(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("DSN %q: %v", dsn, err)
	}
	if u.Scheme != "postgres" || u.User.Username() != "postgres" || u.Hostname() != "127.0.0.1" ||
		u.Port() == "" || u.Query().Get("sslmode") != "disable" {
		t.Errorf("DSN %q: want postgres://postgres@127.0.0.1:PORT/DB?sslmode=disable", dsn)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if !strings.HasPrefix(name, "t_") {
		t.Errorf("database name %q: want prefix t_", name)
	}
	if got := psql(t, dsn, "select current_database()"); got != name {
		t.Errorf("current_database() = %q, want %q", got, name)
	}
	return name
}

func TestSmoke(t *testing.T) {
	t.Parallel() // races TestIsolation to start the cluster

	var (
		mu   sync.Mutex
		seen = map[string]string{} // database name -> test that owns it
	)
	claim := func(t *testing.T, name string) {
		mu.Lock()
		defer mu.Unlock()
		if owner, ok := seen[name]; ok {
			t.Errorf("database %q handed to both %s and %s", name, owner, t.Name())
		}
		seen[name] = t.Name()
	}

	claim(t, checkDSN(t, pgtest.DSN(t)))
	claim(t, checkDSN(t, pgtest.DSN(t)))
	for i := range 4 {
		t.Run(fmt.Sprintf("parallel%d", i), func(t *testing.T) {
			t.Parallel()
			claim(t, checkDSN(t, pgtest.DSN(t)))
		})
	}
}

func TestIsolation(t *testing.T) {
	t.Parallel()
	a, b := pgtest.DSN(t), pgtest.DSN(t)

	psql(t, a, "create table widgets (id int primary key); insert into widgets values (1)")
	if got := psql(t, a, "select count(*) from widgets"); got != "1" {
		t.Errorf("count in a = %q, want 1", got)
	}
	if got := psql(t, b, "select to_regclass('public.widgets') is null"); got != "t" {
		t.Errorf("table created in a is visible in b (to_regclass is null = %q)", got)
	}
}

func TestDatabaseDroppedOnCleanup(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("owner", func(t *testing.T) {
		// Cleanups run last-in first-out, so this one runs after the drop
		// registered by DSN: the drop must cope with the open session.
		var session *exec.Cmd
		t.Cleanup(func() {
			if session != nil {
				session.Process.Kill()
				session.Wait()
			}
		})
		dsn := pgtest.DSN(t)
		name = checkDSN(t, dsn)
		session = exec.Command(psqlPath(t), "-X", "-d", dsn, "-c", "select pg_sleep(300)")
		if err := session.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor := "select count(*) from pg_stat_activity where datname = current_database() and query like '%pg_sleep(300)' and pid <> pg_backend_pid()"
		for deadline := time.Now().Add(30 * time.Second); psql(t, dsn, waitFor) != "1"; {
			if time.Now().After(deadline) {
				t.Fatal("background session never showed up in pg_stat_activity")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	other := pgtest.DSN(t)
	q := fmt.Sprintf("select count(*) from pg_database where datname = '%s'", name)
	if got := psql(t, other, q); got != "0" {
		t.Errorf("database %q still exists after its test finished (count = %s)", name, got)
	}
}
