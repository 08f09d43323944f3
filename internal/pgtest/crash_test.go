package pgtest

import (
	"os"
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
	c := NewServer(t).c // its own cluster: the shared one must not crash
	if got := c.crashLines(); got != "" {
		t.Fatalf("a fresh cluster's log records dead processes:\n%s", got)
	}
	want := crashBackend(t, c)
	if !strings.Contains(c.crashLines(), "select pg_sleep(300)") {
		t.Errorf("crashLines lacks the statement the process was running:\n%s", c.crashLines())
	}
	err := c.client("dropdb", "--", "no_such_database")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a failing client command's error does not carry the crash lines: %v", err)
	}
	awaitRecovery(t, c)
}

// crashChildEnv makes TestCrashChild crash a backend of the shared
// cluster.
const crashChildEnv = "PGTEST_CRASH_CHILD"

// TestCrashChild, run in a child process by TestMainReportsDeadProcess,
// kills a backend of the test binary's shared cluster and waits for the
// server to recover, so that Main finds the crash in the log.
func TestCrashChild(t *testing.T) {
	if os.Getenv(crashChildEnv) == "" {
		t.Skip("runs only as the child of TestMainReportsDeadProcess")
	}
	DSN(t) // starts the shared cluster
	crashBackend(t, shared.c)
	awaitRecovery(t, shared.c)
}

// TestMainReportsDeadProcess runs a test binary whose shared cluster
// lost a backend to SIGKILL, and checks that Main printed the
// postmaster's lines about it to standard error although every test
// passed.
func TestMainReportsDeadProcess(t *testing.T) {
	DSN(t) // skips or fails like every PostgreSQL test when the binaries are missing
	child := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	child.Env = append(os.Environ(), crashChildEnv+"=1")
	var stderr strings.Builder
	child.Stderr = &stderr
	out, err := child.Output()
	if err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	if !strings.Contains(stderr.String(), "pgtest: the shared cluster's log records server processes that died:") ||
		!strings.Contains(stderr.String(), ") was terminated by signal 9") {
		t.Errorf("Main did not report the dead backend; stderr:\n%s", stderr.String())
	}
}

// crashBackend starts a session on c that sleeps, kills its backend with
// SIGKILL once the sleep runs and waits until c's log records the death; it returns the
// text crashLines must hold ("(PID n) was terminated by signal 9").
func crashBackend(t *testing.T, c *cluster) string {
	t.Helper()
	dsn := "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.port) + "/postgres?sslmode=disable&application_name=victim"
	session := exec.Command(filepath.Join(c.bin, "psql"), "-X", "-d", dsn, "-c", "select pg_sleep(300)")
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Process.Kill(); session.Wait() })

	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; {
		out, err := c.output(false, "psql", "-X", "-At", "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres", "-d", "postgres",
			"-c", "select pid from pg_stat_activity where application_name = 'victim' and state = 'active' and query = 'select pg_sleep(300)'")
		if err != nil {
			t.Fatal(err)
		}
		if pid, _ = strconv.Atoi(strings.TrimSpace(out)); pid != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the victim session's sleep never showed up in pg_stat_activity")
		}
		// Polling pg_stat_activity until the sleep runs: a backend killed
		// before its statement began has no statement to log.
		time.Sleep(20 * time.Millisecond)
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
	return want
}

// awaitRecovery waits until c accepts connections again after a crash: a
// fast shutdown asked for during crash recovery can outwait pg_ctl's
// limit.
func awaitRecovery(t *testing.T, c *cluster) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); c.client("psql", "-X", "-d", "postgres", "-c", "select 1") != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the server never accepted connections again after the crash; log tail:\n%s", c.logTail())
		}
		time.Sleep(50 * time.Millisecond) // polling the server's recovery
	}
}
