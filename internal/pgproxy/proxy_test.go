package pgproxy

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// via returns dsn with its host:port replaced by the proxy's.
func via(t *testing.T, dsn string, p *Proxy) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

func start(t *testing.T) (dsn string, p *Proxy) {
	t.Helper()
	dsn = pgtest.DSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err = Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return dsn, p
}

// TestCutCommit: with the proxy armed for "INSERT INTO t", the commit of
// a transaction that inserted into t executes in PostgreSQL but its reply
// never reaches the client, whose connection breaks; other transactions
// before and after pass untouched.
func TestCutCommit(t *testing.T) {
	dsn, p := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct := directConn(t, ctx, dsn, `CREATE TABLE t (n int PRIMARY KEY); CREATE TABLE u (n int)`)

	conn, err := pgx.Connect(ctx, via(t, dsn, p))
	if err != nil {
		t.Fatalf("connecting through the proxy: %v", err)
	}
	defer conn.Close(context.Background())
	p.CutCommitOf("INSERT INTO t")

	// A matching statement outside a transaction has no COMMIT to cut,
	// and must not make the next, unrelated transaction's commit match.
	if _, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1)`, 98); err != nil {
		t.Fatalf("autocommit statement through the armed proxy: %v", err)
	}
	// A transaction that does not match passes, and so does its commit.
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO u VALUES ($1)`, 1)
		return err
	}); err != nil {
		t.Fatalf("unmatched transaction through the armed proxy: %v", err)
	}
	// A rolled-back match does not trigger the cut either.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, 99); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("rollback through the armed proxy: %v", err)
	}

	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit of the matching transaction succeeded; want its reply cut")
	}
	select {
	case c := <-p.Cuts():
		if c.Statement == "" {
			t.Errorf("cut without the statement: %+v", c)
		}
	case <-ctx.Done():
		t.Fatal("no cut reported")
	}
	var n int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM t WHERE n = 7`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("row of the cut commit: count %d, %v; want it committed", n, err)
	}
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM t WHERE n = 99`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("row of the rolled-back transaction: count %d, %v; want none", n, err)
	}

	// One-shot: a new connection's matching commit passes.
	again, err := pgx.Connect(ctx, via(t, dsn, p))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(context.Background())
	if err := pgx.BeginFunc(ctx, again, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, 8)
		return err
	}); err != nil {
		t.Fatalf("matching transaction after the one cut: %v", err)
	}
	if got := len(p.Done()); got != 1 {
		t.Errorf("%d cuts; want 1", got)
	}
}

// TestTLSRefused: a client that prefers TLS is told the server has none
// and continues in plain text through the proxy.
func TestTLSRefused(t *testing.T) {
	dsn, p := start(t)
	u, _ := url.Parse(via(t, dsn, p))
	q := u.Query()
	q.Set("sslmode", "prefer")
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("sslmode=prefer through the proxy: %v", err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
}

// TestCutThenDown: armed with CutCommitOfThenDown, the matching commit
// executes but its reply is lost, every other proxied connection breaks
// at the same moment, and new connections are refused until Up.
func TestCutThenDown(t *testing.T) {
	dsn, p := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct := directConn(t, ctx, dsn, `CREATE TABLE t (n int PRIMARY KEY)`)
	other, err := pgx.Connect(ctx, via(t, dsn, p))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	conn, err := pgx.Connect(ctx, via(t, dsn, p))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	p.CutCommitOfThenDown("INSERT INTO t")
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
		return err
	}); err == nil {
		t.Fatal("commit of the matching transaction succeeded; want its reply cut")
	}
	var n int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM t WHERE n = 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("row of the cut commit: count %d, %v; want it committed", n, err)
	}
	if err := other.Ping(ctx); err == nil {
		t.Error("another proxied connection still works during the outage")
	}
	if c, err := pgx.Connect(ctx, via(t, dsn, p)); err == nil {
		c.Close(ctx)
		t.Fatal("a new connection was forwarded during the outage")
	}
	select {
	case <-p.Refused():
	case <-ctx.Done():
		t.Fatal("the refused connection was not reported")
	}
	p.Up()
	after, err := pgx.Connect(ctx, via(t, dsn, p))
	if err != nil {
		t.Fatalf("connecting after Up: %v", err)
	}
	defer after.Close(context.Background())
	if err := after.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("reading after Up: %d, %v", n, err)
	}
}

// directConn connects to dsn without the proxy, runs ddl and closes the
// connection when t ends; ctx bounds its use.
func directConn(t *testing.T, ctx context.Context, dsn, ddl string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if _, err := c.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	return c
}
