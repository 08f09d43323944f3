// Package orderstest runs the order examples (gormorders, sqlxorders) as
// real processes against real databases and checks what their order
// rows and idem records show: a SIGKILL before the commit leaves neither,
// a retry with the same key then executes exactly once, and a replay
// returns the stored answer without writing again.
package orderstest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver

	"github.com/idemkit/idem/harness/launch"
	"github.com/idemkit/idem/internal/mytest"
	"github.com/idemkit/idem/internal/pgtest"
)

// Engine is a fresh database for one test: the DSN the example takes
// (-db) and a connection of the test's own to look at it.
type Engine struct {
	Name string
	DSN  string
	DB   *sql.DB
}

// Postgres returns a fresh PostgreSQL database (internal/pgtest).
func Postgres(t *testing.T) Engine {
	dsn := pgtest.DSN(t)
	return Engine{Name: "postgres", DSN: dsn, DB: open(t, "pgx", dsn)}
}

// MariaDB returns a fresh MariaDB database (internal/mytest).
func MariaDB(t *testing.T) Engine {
	raw := mytest.DSN(t)
	cfg, err := mysql.ParseDSN(raw)
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("mysql://%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
	if cfg.Passwd != "" {
		dsn = fmt.Sprintf("mysql://%s:%s@%s/%s", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
	}
	return Engine{Name: "mariadb", DSN: dsn, DB: open(t, "mysql", raw)}
}

// SQLite returns a fresh SQLite database file.
func SQLite(t *testing.T) Engine {
	path := filepath.Join(t.TempDir(), "orders.db")
	return Engine{Name: "sqlite", DSN: "sqlite:" + path, DB: open(t, "sqlite", path)}
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Count returns the number of rows of table ("orders", "idem_operations").
func (e Engine) Count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

// Binary builds the example in dir (a package path relative to the test's
// directory, "." for its own) into a temporary directory that main's
// return removes; main is TestMain's m.Run. It returns the program's path
// through bin.
func Binary(bin *string, dir string, main func() int) int {
	tmp, err := os.MkdirTemp("", "orders-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	*bin = filepath.Join(tmp, "example")
	cmd := exec.Command("go", "build", "-o", *bin, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the example: %v\n%s", err, out)
		return 1
	}
	return main()
}

// Server is a running example.
type Server struct {
	*launch.Child
}

// Start runs bin on e with args and the extra environment env, and
// stops it when t ends (if it still runs).
func Start(t *testing.T, bin string, e Engine, env []string, args ...string) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := launch.Start(ctx, launch.Spec{Bin: bin, Args: append([]string{"-db", e.DSN, "-addr", "127.0.0.1:0"}, args...), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("%s output:\n%s", c.Name(), c.Log())
		}
	})
	return &Server{c}
}

// Reply is an answer of POST /orders.
type Reply struct {
	Status   int
	Replayed string
	Body     string
}

// Post sends an order with key; a transport error is returned as err.
func (s *Server) Post(key, body string) (Reply, error) {
	req, err := http.NewRequest(http.MethodPost, s.URL()+"/orders", bytes.NewReader([]byte(body)))
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("X-User", "ann")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotent-Replayed"), Body: string(b)}, err
}

// MustPost is Post that fails t on a transport error.
func (s *Server) MustPost(t *testing.T, key, body string) Reply {
	t.Helper()
	r, err := s.Post(key, body)
	if err != nil {
		t.Fatalf("POST /orders: %v", err)
	}
	return r
}

// WantKilled waits (bounded) for the process to exit and checks that
// SIGKILL ended it.
func (s *Server) WantKilled(t *testing.T) {
	t.Helper()
	select {
	case <-s.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the example still runs 30 s after its failpoint should have killed it")
	}
	if sig, ok := launch.ExitSignal(s.Wait()); !ok || sig != syscall.SIGKILL {
		t.Fatalf("the example exited with %v; want death by SIGKILL", s.Wait())
	}
}

// Key and Order are the test's request.
const (
	Key   = "0b5b8a4e-9f52-4a8e-8a43-3c1f0f6f7e21"
	Order = `{"sku":"A-1","qty":2}`
)

// KillBeforeCommit runs the example with the before-commit failpoint set
// to kill (IDEM_FAILPOINTS): the process dies by SIGKILL after the
// handler wrote the order through the *sql.Tx and before the commit.
// Neither the order nor the idem record may exist afterwards; a retry
// with the same key on a fresh process then creates the order exactly
// once, and another retry is a replay.
func KillBeforeCommit(t *testing.T, bin string, e Engine) {
	s := Start(t, bin, e, []string{"IDEM_FAILPOINTS=before-commit=kill"})
	if r, err := s.Post(Key, Order); err == nil {
		t.Fatalf("the request was answered (%d %s) by a process that should have died before its commit", r.Status, r.Body)
	}
	s.WantKilled(t)
	if n := e.Count(t, "orders"); n != 0 {
		t.Errorf("after the kill: %d orders, want 0", n)
	}
	if n := e.Count(t, "idem_operations"); n != 0 {
		t.Errorf("after the kill: %d idem records, want 0", n)
	}

	s = Start(t, bin, e, nil)
	first := s.MustPost(t, Key, Order)
	if first.Status != http.StatusCreated || first.Replayed != "" {
		t.Fatalf("the retry after the crash: %d replayed=%q %s, want a first 201", first.Status, first.Replayed, first.Body)
	}
	again := s.MustPost(t, Key, Order)
	if again.Status != http.StatusCreated || again.Replayed != "true" || again.Body != first.Body {
		t.Errorf("the second retry: %d replayed=%q %s, want the replay of %s", again.Status, again.Replayed, again.Body, first.Body)
	}
	if n := e.Count(t, "orders"); n != 1 {
		t.Errorf("%d orders after the retries, want exactly 1", n)
	}
	if n := e.Count(t, "idem_operations"); n != 1 {
		t.Errorf("%d idem records after the retries, want 1", n)
	}
}

// Replay runs the example with args and checks that a second request
// with the same key replays the first answer without a second order, and
// that a new key makes a new order.
func Replay(t *testing.T, bin string, e Engine, args ...string) {
	s := Start(t, bin, e, nil, args...)
	first := s.MustPost(t, Key, Order)
	if first.Status != http.StatusCreated || first.Replayed != "" {
		t.Fatalf("first request: %d replayed=%q %s", first.Status, first.Replayed, first.Body)
	}
	again := s.MustPost(t, Key, Order)
	if again.Status != http.StatusCreated || again.Replayed != "true" || again.Body != first.Body {
		t.Errorf("retry: %d replayed=%q %s, want the replay of %s", again.Status, again.Replayed, again.Body, first.Body)
	}
	if n := e.Count(t, "orders"); n != 1 {
		t.Errorf("%d orders after a request and its retry, want 1", n)
	}
	other := s.MustPost(t, "6f1d2c3b-4a59-4e68-b7c6-d5e4f3a2b1c0", `{"sku":"B-2","qty":1}`)
	if other.Status != http.StatusCreated || other.Replayed != "" {
		t.Errorf("a new key: %d replayed=%q %s", other.Status, other.Replayed, other.Body)
	}
	if n := e.Count(t, "orders"); n != 2 {
		t.Errorf("%d orders after two keys, want 2", n)
	}
}
