package mytest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
)

// errNoBinaries reports that the server binaries are missing.
var errNoBinaries = errors.New("mytest: MariaDB binaries (mariadbd, mariadb-install-db) not found on PATH, /usr/sbin or /usr/bin; install Debian's mariadb-server to run these tests")

const (
	startAttempts = 3                // server start attempts, each on a fresh port
	cmdTimeout    = 2 * time.Minute  // bound of mariadb-install-db and of a copy
	readyTimeout  = 60 * time.Second // bound of a start and of a shutdown
	logTailBytes  = 4096             // how much of the error log goes into errors
	socketName    = "mysqld.sock"
	pidName       = "mysqld.pid"
	logName       = "mysqld.err"
)

// server is one running mariadbd in a private temporary directory.
type server struct {
	dir  string              // temp root: data dir, error log, socket
	port int                 // TCP port on 127.0.0.1
	cred *syscall.Credential // non-nil when the server must drop root
	cmd  *exec.Cmd           // the running mariadbd
	done chan struct{}       // closed when cmd has exited
	db   *sql.DB             // root over the unix socket, no database
}

// binaries returns the paths of the server and of the install script.
func binaries() (server, install string, err error) {
	find := func(names ...string) string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
			for _, d := range []string{"/usr/sbin", "/usr/bin"} {
				if p := filepath.Join(d, n); isExec(p) {
					return p
				}
			}
		}
		return ""
	}
	server, install = find("mariadbd", "mysqld"), find("mariadb-install-db", "mysql_install_db")
	if server == "" || install == "" {
		return "", "", errNoBinaries
	}
	return server, install, nil
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// template is a data directory made by mariadb-install-db once per test
// binary; every server starts on a copy of it.
var template struct {
	once sync.Once
	dir  string // the idem-mytest-* directory holding "data"
	err  error
}

// templateData returns the template data directory, making it first.
func templateData(cred *syscall.Credential) (string, error) {
	template.once.Do(func() {
		_, install, err := binaries()
		if err != nil {
			template.err = err
			return
		}
		dir, err := newDir(cred)
		if err != nil {
			template.err = err
			return
		}
		args := []string{"--no-defaults", "--datadir=" + filepath.Join(dir, "data"),
			"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}
		if cred != nil {
			args = append(args, "--user=mysql")
		}
		if err := run(dir, install, args...); err != nil {
			os.RemoveAll(dir)
			template.err = err
			return
		}
		template.dir = dir
	})
	if template.err != nil {
		return "", template.err
	}
	return filepath.Join(template.dir, "data"), nil
}

// removeTemplate deletes the template, once no server will be started.
func removeTemplate() {
	template.once.Do(func() { template.err = errStopped })
	if template.dir != "" {
		os.RemoveAll(template.dir)
	}
}

// newDir makes an empty idem-mytest-* directory recording its owner (and
// owned by the server's OS user), after reaping stale ones.
func newDir(cred *syscall.Credential) (string, error) {
	reapStale(os.TempDir())
	dir, err := os.MkdirTemp("", "idem-mytest-")
	if err != nil {
		return "", fmt.Errorf("mytest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("mytest: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("mytest: %w", err)
		}
	}
	return dir, nil
}

// startServer starts a server on a copy of the template data directory,
// with the extra mariadbd options opts. On failure nothing is left behind.
func startServer(opts []string) (_ *server, err error) {
	bin, _, err := binaries()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = mysqlCredential(); err != nil {
			return nil, err
		}
	}
	tmpl, err := templateData(cred)
	if err != nil {
		return nil, err
	}
	dir, err := newDir(cred)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := run(dir, "cp", "-a", tmpl, filepath.Join(dir, "data")); err != nil {
		return nil, err
	}
	s := &server{dir: dir, cred: cred}
	for range startAttempts {
		if err = s.start(bin, opts); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// start runs mariadbd on a free port and waits until it answers on its
// socket; if it exits first (the port was taken), it reports why.
func (s *server) start(bin string, opts []string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	args := []string{"--no-defaults",
		"--datadir=" + filepath.Join(s.dir, "data"),
		"--socket=" + filepath.Join(s.dir, socketName),
		"--pid-file=" + filepath.Join(s.dir, pidName),
		"--log-error=" + filepath.Join(s.dir, logName),
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--character-set-server=utf8mb4",
		"--innodb-flush-log-at-trx-commit=1",
		"--innodb-buffer-pool-size=128M",
		"--max-connections=400",
	}
	if s.cred != nil {
		args = append(args, "--user=mysql")
	}
	cmd := exec.Command(bin, append(args, opts...)...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // no terminal signals
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mytest: starting %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	db, err := sql.Open("mysql", "root@unix("+filepath.Join(s.dir, socketName)+")/?timeout=5s")
	if err != nil {
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("mytest: %w", err)
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			s.port, s.cmd, s.done, s.db = port, cmd, done, db
			return nil
		}
		select {
		case <-done:
			db.Close()
			return fmt.Errorf("mytest: mariadbd exited during start: %v\n--- error log tail ---\n%s", cmd.ProcessState, s.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			db.Close()
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("mytest: mariadbd did not answer within %v: %v\n--- error log tail ---\n%s", readyTimeout, err, s.logTail())
		}
	}
}

// stop shuts the server down cleanly (SHUTDOWN, then waiting for the
// process to exit) and deletes its directory; if it does not exit in
// time it is killed and the directory kept for inspection.
func (s *server) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "SHUTDOWN")
	s.db.Close()
	select {
	case <-s.done:
	case <-ctx.Done():
		s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("mytest: mariadbd in %s did not stop within %v (SHUTDOWN: %v); killed\n--- error log tail ---\n%s",
			s.dir, readyTimeout, err, s.logTail())
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("mytest: %w", err)
	}
	return nil
}

// admin runs one statement as root with no database selected.
func (s *server) admin(ctx context.Context, stmt string) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("mytest: %s: %w", stmt, err)
	}
	return nil
}

// dsn is the go-sql-driver/mysql DSN of database name on s over TCP.
func (s *server) dsn(name string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", s.port, name)
}

// logTail returns the end of the error log.
func (s *server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, logName))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return string(b)
}

// run executes a helper command in dir; its output goes into the error.
func run(dir, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mytest: %s %v: %w\n%s", name, args, err, out.Bytes())
	}
	return nil
}

// mysqlCredential looks up the mysql OS user for dropping root.
func mysqlCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("mytest: running as root needs a 'mysql' OS user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("mytest: uid of mysql: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("mytest: gid of mysql: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort asks the kernel for an unused TCP port on 127.0.0.1; it may be
// taken before the server binds it, and startServer then retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("mytest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
