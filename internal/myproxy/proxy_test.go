package myproxy

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/internal/mytest"
)

func TestMain(m *testing.M) { mytest.Main(m) }

// TestCutCommit: through the proxy, a transaction that sent the armed
// text has its COMMIT executed by the server but its answer lost (the
// client's Commit fails), and the rows are there; the proxy is disarmed
// after one cut, and other transactions pass.
func TestCutCommit(t *testing.T) {
	native := mytest.DSN(t) // root@tcp(127.0.0.1:PORT)/DB
	_, rest, _ := strings.Cut(native, "@tcp(")
	addr, dbName, _ := strings.Cut(rest, ")/")
	p, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	direct, err := sql.Open("mysql", native)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	via, err := sql.Open("mysql", "root@tcp("+p.Addr()+")/"+dbName)
	if err != nil {
		t.Fatal(err)
	}
	defer via.Close()
	if _, err := direct.ExecContext(ctx, `CREATE TABLE t (n INT PRIMARY KEY) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	insert := func(n int) error {
		tx, err := via.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (n) VALUES (?)`, n); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	p.CutCommitOf("INSERT INTO t")
	if err := insert(1); err == nil {
		t.Fatal("the cut COMMIT succeeded for the client")
	}
	select {
	case stmt := <-p.Cuts():
		if !strings.Contains(stmt, "INSERT INTO t") {
			t.Errorf("cut for %q", stmt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no cut")
	}
	if err := insert(2); err != nil {
		t.Fatalf("a transaction after the cut: %v", err)
	}
	var n int
	if err := direct.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2: the cut COMMIT was executed", n, err)
	}
}
