package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PoolerEnv is the environment variable that, set to "1", puts PgBouncer
// (from PATH or /usr/sbin) in transaction pooling mode in front of the
// shared cluster: DSN then returns connection strings on PgBouncer's
// port, while databases are still created and dropped on the server's.
// Without a pgbouncer binary the tests fail (the variable asks for it).
const PoolerEnv = "IDEM_TEST_PGBOUNCER"

// pooler is a running PgBouncer in front of a cluster.
type pooler struct {
	port int
	pid  string // its pidfile
	log  string
}

// poolerWanted reports whether the tests asked for PgBouncer.
func poolerWanted() bool { return os.Getenv(PoolerEnv) == "1" }

// Pooled reports whether DSN leads through PgBouncer in transaction mode
// (PoolerEnv=1), for the few tests of what needs a session of its own.
func Pooled() bool { return poolerWanted() }

// startPooler starts PgBouncer for c in transaction pooling mode: every
// database of the cluster, any user without a password (the cluster
// trusts 127.0.0.1), 20 server connections per database and user.
func startPooler(c *cluster) (*pooler, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			return nil, errors.New("pgtest: " + PoolerEnv + "=1 but no pgbouncer binary on PATH or in /usr/sbin")
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &pooler{port: port, pid: filepath.Join(c.dir, "pgbouncer.pid"), log: filepath.Join(c.dir, "pgbouncer.log")}
	ini := filepath.Join(c.dir, "pgbouncer.ini")
	conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
max_db_connections = 40
server_reset_query =
ignore_startup_parameters = extra_float_digits,idem_pooler
logfile = %s
pidfile = %s
`, c.port, port, p.log, p.pid)
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-d", ini)
	cmd.Env = cleanEnv()
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: pgbouncer: %w\n%s", err, out)
	}
	// -d returns once it forked; wait for the port to answer.
	deadline := time.Now().Add(30 * time.Second)
	for !listening(port) {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.log)
			return nil, fmt.Errorf("pgtest: pgbouncer did not listen on %d\n%s", port, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, nil
}

// stop ends PgBouncer (SIGINT: it closes its connections and exits).
func (p *pooler) stop() {
	b, err := os.ReadFile(p.pid)
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		_ = syscall.Kill(pid, syscall.SIGINT)
		for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// listening reports whether something accepts TCP connections on
// 127.0.0.1:port.
func listening(port int) bool {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
