package pgtest

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInheritedFDsStayOut: a test process started with an extra pipe (as
// a fuzzing worker is, by its coordinator) starts a cluster and is then
// killed; the server outlives it, but must not hold the pipe: its reader
// sees it closed. (Otherwise the coordinator, which reads until then,
// waits forever.) The child is TestReapChild; the orphaned server is
// reaped at the end.
func TestInheritedFDsStayOut(t *testing.T) {
	DSN(t) // skips or fails like every PostgreSQL test when the binaries are missing
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	child := exec.Command(os.Args[0], "-test.run=^TestReapChild$", "-test.count=1")
	child.Env = append(os.Environ(), reapChildEnv+"=1")
	child.ExtraFiles = []*os.File{w} // the child's descriptor 3, not close-on-exec
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	line, err := bufio.NewReader(out).ReadString('\n')
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	if err != nil {
		t.Fatalf("child: %v (no cluster line)", err)
	}
	dir, portText, _ := strings.Cut(strings.TrimSpace(line), " ")
	port, _ := strconv.Atoi(portText)
	defer func() {
		bin, _ := binDir()
		reapStale(filepath.Dir(dir), bin, shared.c.cred)
	}()
	if !accepts(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))) {
		t.Fatalf("the killed child's server is not running: the test proves nothing")
	}

	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		closed <- err
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("reading the pipe: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pipe the killed child inherited is still open 10 s after its death: its server holds it")
	}
}
