package pgtest

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCrashLinesNameTheDeadProcess kills one backend of a real cluster
// with SIGKILL, as a crash would end it, and checks that the log lines
// the postmaster writes about it reach crashLines and the error of a
// failing client command: a failure in a run nobody can repeat must
// still name the process and its signal.
func TestCrashLinesNameTheDeadProcess(t *testing.T) {
	c, err := startCluster()
	if err != nil {
		t.Skip(err) // the package's other tests report a cluster that cannot start
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Error(err)
		}
	})
	if got := c.crashLines(); got != "" {
		t.Fatalf("a fresh cluster's log records dead processes:\n%s", got)
	}
	dsn := "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.port) + "/postgres?sslmode=disable&application_name=victim"
	session := exec.Command(filepath.Join(c.bin, "psql"), "-X", "-d", dsn, "-c", "select pg_sleep(300)")
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Process.Kill(); session.Wait() })

	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; {
		out, err := c.output(false, "psql", "-X", "-At", "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres", "-d", "postgres",
			"-c", "select pid from pg_stat_activity where application_name = 'victim'")
		if err != nil {
			t.Fatal(err)
		}
		pid, _ = strconv.Atoi(strings.TrimSpace(out))
		if pid == 0 && time.Now().After(deadline) {
			t.Fatal("the victim session never showed up in pg_stat_activity")
		}
		time.Sleep(20 * time.Millisecond) // polling pg_stat_activity for the session
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	want := "(PID " + strconv.Itoa(pid) + ") was terminated by signal 9"
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(c.crashLines(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("crashLines never named %q; log tail:\n%s", want, c.logTail())
		}
		time.Sleep(20 * time.Millisecond) // polling the server log for the postmaster's line
	}
	if !strings.Contains(c.crashLines(), "select pg_sleep(300)") {
		t.Errorf("crashLines lacks the statement the process was running:\n%s", c.crashLines())
	}
	err = c.client("dropdb", "--", "no_such_database")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a failing client command's error does not carry the crash lines: %v", err)
	}
	// A fast shutdown asked for during crash recovery can outwait
	// pg_ctl's limit: let the server finish recovering first.
	for deadline := time.Now().Add(60 * time.Second); c.client("psql", "-X", "-d", "postgres", "-c", "select 1") != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the server never accepted connections again after the crash; log tail:\n%s", c.logTail())
		}
		time.Sleep(50 * time.Millisecond) // polling the server's recovery
	}
}
