// Package rabbittest gives Go tests a real, throwaway RabbitMQ broker, the
// way internal/pgtest gives them PostgreSQL.
//
// Each test binary that uses the package must call [Main] from its
// TestMain:
//
//	func TestMain(m *testing.M) { rabbittest.Main(m) }
//
// The first call to [URL] starts one broker for the test binary (lazily,
// exactly once: RabbitMQ takes seconds to boot); Main stops it after the
// tests. Tests share it, so each names its own queues and exchanges
// (a test's name is a good prefix). Defaults:
//
//   - Debian's rabbitmq-server (its /usr/lib/rabbitmq/bin/rabbitmq-server,
//     run as the current user: the packaged wrapper would switch to the
//     rabbitmq user) and the Erlang port mapper epmd;
//   - AMQP on 127.0.0.1 on a free port; the node's distribution port and
//     a private epmd on free ports too, so a broker the machine runs is
//     never touched;
//   - node name, database, logs, feature flags and the Erlang cookie
//     ($HOME) in a fresh directory under [os.TempDir] named
//     idem-rabbittest-*, removed by Main; no plugins, the default user
//     guest/guest.
//
// If the binaries are missing, URL skips the test, unless the
// environment variable IDEM_REQUIRE_RABBITMQ=1 is set, in which case it
// fails it.
//
// If the test binary is killed before Main returns, the broker outlives
// it; the next broker started on the machine reaps it: each directory
// records its owner's process ID and the broker's process groups, and a
// broker whose owner no longer exists is killed and its directory
// deleted.
package rabbittest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/internal/procgroup"
)

// RequireEnv is the environment variable that turns a missing RabbitMQ
// installation from a skip into a test failure when set to "1".
const RequireEnv = "IDEM_REQUIRE_RABBITMQ"

// Paths of Debian's packages.
const (
	serverScript = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	epmdGlob     = "/usr/lib/erlang/erts-*/bin/epmd"
)

// readyTimeout bounds a broker's boot: until an AMQP connection opens.
const readyTimeout = 2 * time.Minute

var (
	mainCalled atomic.Bool
	shared     struct {
		once sync.Once
		b    *broker
		err  error
	}
)

// broker is one running RabbitMQ node with its epmd.
type broker struct {
	dir        string
	url        string
	node, epmd *procgroup.Group // each leads its process group
}

// Main runs the tests and then stops the broker, if one was started, and
// removes its directory. Call it from TestMain; it exits the process.
func Main(m *testing.M) { os.Exit(Runner{M: m}.Run()) }

// Runner runs a test binary's tests with a broker, for a TestMain that
// needs other servers too: pgtest.Main(rabbittest.Runner{M: m}).
type Runner struct{ M interface{ Run() int } }

// Run runs the tests and stops the broker; it returns the exit code.
func (r Runner) Run() int {
	mainCalled.Store(true)
	code := r.M.Run()
	shared.once.Do(func() { shared.err = errors.New("rabbittest: stopped") })
	if shared.b != nil {
		shared.b.stop()
	}
	return code
}

// URL returns the AMQP URL of the test binary's broker, starting it on
// the first call; it skips t (or fails it, with IDEM_REQUIRE_RABBITMQ=1)
// when RabbitMQ is not installed, and fails t when the broker cannot
// start.
func URL(t testing.TB) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("rabbittest: call rabbittest.Main from TestMain")
	}
	epmd := epmdBinary()
	if _, err := os.Stat(serverScript); err != nil || epmd == "" {
		msg := "rabbittest: " + serverScript + " or epmd not found; install Debian's rabbitmq-server to run this test"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	shared.once.Do(func() {
		reap()
		shared.b, shared.err = start(epmd)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.b.url
}

// start boots a broker in a fresh directory.
func start(epmd string) (*broker, error) {
	dir, err := os.MkdirTemp("", "idem-rabbittest-")
	if err != nil {
		return nil, err
	}
	b := &broker{dir: dir}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	write := func(name, content string) error {
		return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
	}
	if err := errors.Join(write("enabled_plugins", "[].\n"), write("rabbitmq.conf", ""),
		write("owner.pid", strconv.Itoa(os.Getpid()))); err != nil {
		return nil, err
	}
	// Our own epmd, in the foreground, so it dies with the broker (and,
	// through Pdeathsig, with this process).
	epmdCmd := exec.Command(epmd, "-port", strconv.Itoa(epmdPort))
	epmdCmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	b.epmd = procgroup.New(epmdCmd)
	if err := b.epmd.Start(); err != nil {
		return nil, fmt.Errorf("rabbittest: starting epmd: %w", err)
	}
	name := fmt.Sprintf("idemtest%d", os.Getpid())
	node := exec.Command(serverScript)
	node.Env = append(os.Environ(),
		"HOME="+dir,
		"RABBITMQ_NODENAME="+name+"@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_LOGS="+filepath.Join(dir, "rabbit.log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq"),
		"RABBITMQ_FEATURE_FLAGS_FILE="+filepath.Join(dir, "feature_flags"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
	)
	node.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	node.Stdout, node.Stderr = nil, nil
	b.node = procgroup.New(node)
	if err := b.node.Start(); err != nil {
		b.stop()
		return nil, fmt.Errorf("rabbittest: starting rabbitmq-server: %w", err)
	}
	groups := fmt.Sprintf("%d %d", b.node.Pid(), b.epmd.Pid())
	if err := write("groups", groups); err != nil {
		b.stop()
		return nil, err
	}
	b.url = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort)
	exited := make(chan error, 1)
	go func() { exited <- b.node.Wait() }()
	deadline := time.Now().Add(readyTimeout)
	for {
		if conn, err := amqp.Dial(b.url); err == nil {
			conn.Close()
			return b, nil
		}
		select {
		case err := <-exited:
			log := b.logTail()
			b.node = nil
			b.stop()
			return nil, fmt.Errorf("rabbittest: rabbitmq-server exited (%v) before it accepted AMQP connections:\n%s", err, log)
		case <-time.After(100 * time.Millisecond): // polling the broker's boot
		}
		if time.Now().After(deadline) {
			log := b.logTail()
			b.stop()
			return nil, fmt.Errorf("rabbittest: no AMQP connection within %v:\n%s", readyTimeout, log)
		}
	}
}

// stop kills the broker's process groups and removes its directory. A
// group whose leader has exited and been reaped is not signalled: what
// was left of it died then, and its number may be another's now.
func (b *broker) stop() {
	for _, g := range []*procgroup.Group{b.node, b.epmd} {
		if g != nil {
			g.Signal(syscall.SIGKILL) // not started, or reaped: nothing to kill
		}
	}
	if b.epmd != nil && b.epmd.Pid() != 0 {
		b.epmd.Wait()
	}
	os.RemoveAll(b.dir)
}

// logTail is the end of the broker's log, for an error.
func (b *broker) logTail() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "rabbit.log"))
	return string(out[max(0, len(out)-4096):])
}

// reap kills the brokers of test binaries that died before their Main
// stopped them, and removes their directories.
func reap() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "idem-rabbittest-*"))
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(owner)))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // alive, or not ours to judge
		}
		groups, _ := os.ReadFile(filepath.Join(dir, "groups"))
		for _, f := range strings.Fields(string(groups)) {
			if g, err := strconv.Atoi(f); err == nil {
				procgroup.KillAbandoned(g) // never a group that took the number since
			}
		}
		os.RemoveAll(dir)
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// epmdBinary finds Erlang's epmd.
func epmdBinary() string {
	if p, err := exec.LookPath("epmd"); err == nil {
		return p
	}
	m, _ := filepath.Glob(epmdGlob)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1]
}
