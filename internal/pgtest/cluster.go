package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// errNoBinaries reports that initdb, pg_ctl or postgres is missing from PATH.
var errNoBinaries = errors.New("pgtest: PostgreSQL binaries (initdb, pg_ctl, postgres) not found on PATH; install PostgreSQL 15 to run these tests")

const (
	startAttempts = 3                 // pg_ctl start attempts, each on a fresh port
	cmdTimeout    = 2 * time.Minute   // upper bound for any single helper command
	logTailBytes  = 4096              // how much of the server log goes into errors
	startWaitSecs = "60"              // pg_ctl -t: seconds to wait for start/stop
	serverConfig  = "postgresql.conf" // writeConfig appends its settings here
)

// cluster is one running PostgreSQL server in a private temporary directory.
type cluster struct {
	bin  string              // directory holding initdb, pg_ctl, createdb, ...
	dir  string              // temp root: data dir, log file and unix socket
	data string              // PGDATA
	log  string              // server log file
	port int                 // TCP port on 127.0.0.1
	cred *syscall.Credential // non-nil when server binaries must drop root
	pool *pooler             // PgBouncer in front (PoolerEnv), or nil
}

// binDir returns the directory of the PostgreSQL installation that provides
// initdb on PATH, after resolving symlinks, so that every helper binary comes
// from the same installation. It returns errNoBinaries if initdb, pg_ctl or
// postgres cannot be found.
func binDir() (string, error) {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := exec.LookPath(name); err != nil {
			return "", errNoBinaries
		}
	}
	p, _ := exec.LookPath("initdb")
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("pgtest: resolving %s: %w", p, err)
	}
	return filepath.Dir(real), nil
}

// startCluster initialises and starts a new cluster. On failure nothing is
// left behind.
func startCluster() (_ *cluster, err error) {
	c, err := newCluster()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(c.dir)
		}
	}()
	if err := c.initdb(); err != nil {
		return nil, err
	}
	if err := c.writeConfig(); err != nil {
		return nil, err
	}
	if err := c.start(); err != nil {
		return nil, err
	}
	if poolerWanted() {
		if c.pool, err = startPooler(c); err != nil {
			_ = c.run(true, "pg_ctl", "-m", "immediate", "-w", "-D", c.data, "stop")
			return nil, err
		}
	}
	return c, nil
}

// newCluster prepares an empty cluster directory (owned by the postgres OS
// user when running as root, recording its owner for reapStale), after
// reaping the stale clusters of dead test binaries. Its data directory does
// not exist yet.
func newCluster() (_ *cluster, err error) {
	keepFDsFromDaemons()
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		if cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	reapStale(os.TempDir(), bin, cred)
	dir, err := os.MkdirTemp("", "idem-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "postgres.log"), cred: cred}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	if err := c.writeOwner(); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return c, nil
}

// initdb creates the data directory: superuser postgres, trust
// authentication (which, in PostgreSQL 15, includes replication
// connections from 127.0.0.1), UTF8, C locale.
func (c *cluster) initdb() error {
	// --no-sync only skips initdb's own final fsync of the fresh files; the
	// server itself runs with fsync=on.
	return c.run(true, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
}

// start starts the initialised server on a free port (c.port), with the
// server options opts ("-c name=value", …) on its command line after the
// port, trying up to startAttempts ports.
func (c *cluster) start(opts ...string) (err error) {
	for i := 0; i < startAttempts; i++ {
		if c.port, err = freePort(); err != nil {
			return err
		}
		o := strings.Join(append([]string{"-p " + strconv.Itoa(c.port)}, opts...), " ")
		err = c.run(true, "pg_ctl", "-w", "-t", startWaitSecs, "-D", c.data, "-l", c.log, "-o", o, "start")
		if err == nil {
			return nil
		}
		// The port may have been taken between freePort and the bind; make
		// sure no half-started server survives, then retry on a new port.
		_ = c.run(true, "pg_ctl", "-m", "immediate", "-w", "-D", c.data, "stop")
	}
	return fmt.Errorf("%w\n--- server log tail (%s) ---\n%s", err, c.log, c.logTail())
}

// writeConfig appends the pgtest settings to postgresql.conf. The port is
// passed on the command line instead because it changes between attempts.
func (c *cluster) writeConfig() error {
	conf := fmt.Sprintf(`
# added by pgtest
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 200
shared_buffers = 128MB
fsync = on
synchronous_commit = on
`, strings.ReplaceAll(c.dir, "'", "''"))
	f, err := os.OpenFile(filepath.Join(c.data, serverConfig), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if _, err := f.WriteString(conf); err != nil {
		f.Close()
		return fmt.Errorf("pgtest: %w", err)
	}
	return f.Close()
}

// stop shuts the server down and deletes its directory.
func (c *cluster) stop() error {
	if c.pool != nil {
		c.pool.stop()
	}
	err := c.run(true, "pg_ctl", "-m", "fast", "-w", "-t", startWaitSecs, "-D", c.data, "stop")
	if err != nil {
		err = fmt.Errorf("%w\n--- server log tail (%s) ---\n%s", err, c.log, c.logTail())
		// Keep the directory so the leaked server can be inspected.
		return err
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// client runs a client binary (createdb, dropdb, ...) against the cluster
// over TCP as the postgres superuser.
// When the command fails and the server log records a server process
// that died (a crash that made the postmaster restart every connection),
// the error carries those log lines, so that a failure in a run nobody
// can repeat still names the process, its signal and its statement.
func (c *cluster) client(name string, args ...string) error {
	base := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres", "-w"}
	err := c.run(false, name, append(base, args...)...)
	if err != nil {
		if crash := c.crashLines(); crash != "" {
			err = fmt.Errorf("%w\n--- server processes that died (%s) ---\n%s", err, c.log, crash)
		}
	}
	return err
}

// run executes a binary from c.bin. Server binaries (asServer) run in c.dir
// with the dropped credentials, if any. Output is included in the error.
func (c *cluster) run(asServer bool, name string, args ...string) error {
	_, err := c.output(asServer, name, args...)
	return err
}

// output is run, returning what the command wrote to its standard output.
func (c *cluster) output(asServer bool, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Env = cleanEnv()
	if asServer {
		cmd.Dir = c.dir
		if c.cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// pg_ctl start leaves the server holding no pipe of ours (it redirects
	// to the log file), but bound the wait for output anyway.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("pgtest: %s %s: %w\n%s", name, strings.Join(args, " "), err,
			strings.TrimSpace(out.String()+"\n"+errOut.String()))
	}
	return out.String(), nil
}

// logTail returns the end of the server log.
func (c *cluster) logTail() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return string(b)
}

// crashLines returns the server log's lines about a server process that
// died abnormally ("server process (PID n) was terminated by signal 11",
// "... exited with exit code 1") with the statement it was running (the
// DETAIL line after), or "" when the log records none or cannot be read.
func (c *cluster) crashLines() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	var out []string
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if !strings.Contains(l, "process (PID") ||
			!strings.Contains(l, "terminated by signal") && !strings.Contains(l, "exited with exit code") {
			continue
		}
		out = append(out, l)
		if i+1 < len(lines) && strings.Contains(lines[i+1], "DETAIL:") {
			out = append(out, lines[i+1])
		}
	}
	return strings.Join(out, "\n")
}

// cleanEnv returns the environment without PG* variables, so that a
// developer's PGDATABASE, PGPORT, PGSERVICE, ... cannot redirect the helpers.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// postgresCredential looks up the postgres OS user for dropping root.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs a 'postgres' OS user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: uid of postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: gid of postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort asks the kernel for an unused TCP port on 127.0.0.1. The port is
// released before the server binds it, so another process may grab it in
// between; startCluster retries on a new port when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
