package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestDBPasswordOffArgv: against a PostgreSQL role that must give a
// password (scram-sha-256), "idem migrate" and "idem epoch show" work
// with the password from PGPASSWORD, from a passfile (PGPASSFILE) and
// from a --db-file, none of them on the command line; without it they
// fail. A --db-file its group or others may read is refused (exit 1,
// naming the file and its mode), and --db with --db-file is a usage error.
// Not parallel: it sets the environment. threat:db-password-in-argv
func TestDBPasswordOffArgv(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) }) // after the cleanups below, which use it
	// Roles are the cluster's, which the test binary shares: a role of its
	// own for each run (-count=N runs it again on the same cluster).
	role, password := fmt.Sprintf("idem_pw_user_%d", rand.Uint32()), "pw-Zr4kW9pQ2mX7vT1nB8yL5c"
	var hba string
	if err := conn.QueryRow(ctx, "SHOW hba_file").Scan(&hba); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	// The role alone must give a password; every other role stays trusted.
	line := fmt.Sprintf("host all %s 127.0.0.1/32 scram-sha-256\nhost all %s ::1/128 scram-sha-256\n", role, role)
	if err := os.WriteFile(hba, append([]byte(line), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(hba, old, 0o600)
		conn.Exec(context.Background(), "SELECT pg_reload_conf()")
	})
	for _, q := range []string{
		"SET password_encryption = 'scram-sha-256'",
		fmt.Sprintf("CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'", role, password),
		"SELECT pg_reload_conf()",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // it owns what migrate made in this test's database
		conn.Exec(context.Background(), "REASSIGN OWNED BY "+role+" TO CURRENT_USER")
		conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})

	u, _ := url.Parse(dsn)
	u.User = url.User(role)
	noPassword := u.String()
	dir := t.TempDir()
	t.Setenv("PGPASSFILE", filepath.Join(dir, "no-passfile"))
	t.Setenv("PGPASSWORD", "")
	os.Unsetenv("PGPASSWORD")

	if code, _, stderr := runCmd(t, "", "epoch", "show", "--db", noPassword); code == 0 {
		t.Fatalf("no password at all: exit 0; the role must need one:\n%s", stderr)
	}

	t.Setenv("PGPASSWORD", password)
	if code, _, stderr := runCmd(t, "", "migrate", "--db", noPassword); code != 0 {
		t.Fatalf("PGPASSWORD: migrate exit %d:\n%s", code, stderr)
	}
	os.Unsetenv("PGPASSWORD")

	passfile := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(passfile, []byte(fmt.Sprintf("127.0.0.1:%s:*:%s:%s\n", u.Port(), role, password)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSFILE", passfile)
	if code, out, stderr := runCmd(t, "", "epoch", "show", "--db", noPassword); code != 0 || !strings.Contains(out, "writer epoch") {
		t.Fatalf("PGPASSFILE: epoch show exit %d %q:\n%s", code, out, stderr)
	}
	t.Setenv("PGPASSFILE", filepath.Join(dir, "no-passfile"))

	u.User = url.UserPassword(role, password)
	dsnFile := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsnFile, []byte(u.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCmd(t, "", "epoch", "bump", "--db-file", dsnFile); code != 0 {
		t.Fatalf("--db-file: epoch bump exit %d %q:\n%s", code, out, stderr)
	}
	var epoch int64
	if err := conn.QueryRow(ctx, "SELECT writer_epoch FROM idem_control").Scan(&epoch); err != nil || epoch != 1 {
		t.Fatalf("after epoch bump --db-file: writer_epoch %d, %v; want 1 on the database the file names", epoch, err)
	}
	if code, _, stderr := runCmd(t, "", "epoch", "show", "--db-file", dsnFile, "--db", noPassword); code != exitUsage || !strings.Contains(stderr, "not both") {
		t.Errorf("--db with --db-file: exit %d; want %d:\n%s", code, exitUsage, stderr)
	}
	os.Chmod(dsnFile, 0o640)
	if code, _, stderr := runCmd(t, "", "epoch", "show", "--db-file", dsnFile); code != exitRefused || !strings.Contains(stderr, "mode 0640") || !strings.Contains(stderr, dsnFile) {
		t.Errorf("a 0640 --db-file: exit %d; want %d naming the file and its mode:\n%s", code, exitRefused, stderr)
	}
}
