// Package natstest gives Go tests a real, throwaway NATS server with
// JetStream, the way internal/pgtest gives them PostgreSQL.
//
// [Start] runs one nats-server (Debian's nats-server package, found on
// PATH or in /usr/bin and /usr/sbin) for the calling test and stops it
// when the test ends. Defaults:
//
//   - it listens only on 127.0.0.1, on a port the server picks (-p -1),
//     read back from its "Listening for client connections" log line;
//   - JetStream is on, its store in the test's temporary directory, so
//     streams and consumers die with the test;
//   - no configuration file, no authentication, no TLS.
//
// The server is the test binary's child: it gets SIGKILL when the test
// ends, and (Pdeathsig) when the test binary dies. [Server.Kill] kills it
// at once, for tests of a broker that goes away; [Server.Restart] starts
// it again on the same port with the same store.
//
// If nats-server is missing, Start skips the test, unless the
// environment variable IDEM_REQUIRE_NATS=1 is set, in which case it
// fails it.
package natstest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a missing nats-server
// from a skip into a test failure when set to "1".
const RequireEnv = "IDEM_REQUIRE_NATS"

// readyTimeout bounds a start: the time until the server logs that it
// listens for clients.
const readyTimeout = 30 * time.Second

// listening matches the server's log line that names its client address.
var listening = regexp.MustCompile(`Listening for client connections on ([0-9.]+:[0-9]+)`)

// Server is one running nats-server. Its methods are safe for
// concurrent use.
type Server struct {
	bin, dir string
	mu       sync.Mutex
	addr     string    // host:port, fixed by the first start
	cmd      *exec.Cmd // the running server; nil after Kill
	log      *lockedBuffer
}

// Start starts a nats-server with JetStream for t and stops it when t
// ends; it skips t (or fails it, with IDEM_REQUIRE_NATS=1) when
// nats-server is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary()
	if bin == "" {
		msg := "natstest: nats-server not found on PATH, /usr/sbin or /usr/bin; install Debian's nats-server to run this test"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Server{bin: bin, dir: t.TempDir(), log: &lockedBuffer{}}
	if err := s.start("-1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// URL is the server's client URL, nats://127.0.0.1:PORT.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://" + s.addr
}

// Kill stops the server with SIGKILL, as a crash would; nothing of
// JetStream's store that the server had not written survives. A no-op
// on a stopped server.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a killed server again on the same port and store.
func (s *Server) Restart() error {
	s.mu.Lock()
	_, port, _ := strings.Cut(s.addr, ":")
	s.mu.Unlock()
	return s.start(port)
}

// Log returns what the server logged so far, for a failing test.
func (s *Server) Log() string { return s.log.String() }

// start runs the server on port ("-1": one it picks) and waits for its
// listening line.
func (s *Server) start(port string) error {
	cmd := exec.Command(s.bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", filepath.Join(s.dir, "jetstream"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("natstest: starting nats-server: %w", err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			s.log.WriteString(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case addr := <-found:
		s.mu.Lock()
		s.addr, s.cmd = addr, cmd
		s.mu.Unlock()
		return nil
	case <-time.After(readyTimeout):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return errors.New("natstest: nats-server did not listen within " + readyTimeout.String() + ":\n" + s.log.String())
	}
}

// binary finds nats-server.
func binary() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin"} {
		p := filepath.Join(d, "nats-server")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// lockedBuffer is a strings.Builder safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
