package pgtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reapChildEnv makes TestReapChild start a cluster, print it and hang.
const reapChildEnv = "PGTEST_REAP_CHILD"

// TestReapChild is the victim of TestReapStale, run in a child process: it
// starts its own cluster, prints "DIR PORT" and waits to be killed.
func TestReapChild(t *testing.T) {
	if os.Getenv(reapChildEnv) == "" {
		t.Skip("runs only as the child of TestReapStale")
	}
	c, err := startCluster()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s %d\n", c.dir, c.port)
	select {}
}

// TestReapStale kills a test binary that owns a running cluster with
// SIGKILL, checks that its server outlived it, and then that reapStale
// stops the server and deletes the directory, while the cluster of this
// (live) process stays.
func TestReapStale(t *testing.T) {
	DSN(t) // skips or fails like every PostgreSQL test when the binaries are missing
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
		t.Fatalf("child: %v (no cluster line)", err)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	dir, portText, _ := strings.Cut(strings.TrimSpace(line), " ")
	port, err := strconv.Atoi(portText)
	if err != nil || !strings.HasPrefix(filepath.Base(dir), "idem-pgtest-") {
		t.Fatalf("child printed %q", line)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if !accepts(addr) {
		t.Fatalf("the killed child's server on %s is not running: nothing to reap, the test proves nothing", addr)
	}

	bin, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	reaped := reapStale(filepath.Dir(dir), bin, shared.c.cred)
	if !slices.Contains(reaped, dir) {
		t.Errorf("reapStale removed %q, want %s among them", reaped, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after reaping (%v)", dir, err)
	}
	if accepts(addr) {
		t.Errorf("the reaped server on %s still accepts connections", addr)
	}
	if _, err := os.Stat(shared.c.dir); err != nil {
		t.Errorf("the live process's own cluster %s was touched: %v", shared.c.dir, err)
	}
}

// accepts reports whether something listens on addr.
func accepts(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
