package idempg

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/registry"
)

// The business transaction as a *sql.Tx (registry.SQLTx).
//
// A Store keeps a *sql.DB over its own pool (pgx's stdlib pool
// connector): it holds no connection of its own (no idle ones), and each
// of its connections is a connection of the pool, taken for one call and
// given back when the call ends. When a business function asks its
// Tx for a *sql.Tx before the transaction's first statement (lazyTx's
// SQLTx), the call's connection is taken through that *sql.DB: a
// *sql.Conn, whose *pgx.Conn (stdlib.Conn.Conn) carries idem's own
// statements — BEGIN and the claim in one batch, then the outcome and
// COMMIT in one batch, as without a *sql.Tx — while the *sql.Tx of that
// *sql.Conn carries the business statements, on the same connection and
// in the same server transaction. Complete and ExecuteOnce calls that
// never ask pay nothing: they take their connection from the pool
// directly, as before. InTx (shadow and off modes, reads) always takes
// its connection through the *sql.DB, so its fn may ask at any time.
//
// What the *sql.Tx costs: its BEGIN (and ExecuteOnce's claim) cannot
// ride with the first business statement, since database/sql sends that
// one by itself: one round trip more than a Tx whose first statement
// carries BEGIN (docs/benchmarks.md, BenchmarkSQLTx).
//
// The *sql.Tx is not the business code's to end: its Commit refuses
// (registry.ErrTxOwned) and rolls the transaction back; its Rollback
// rolls back; either way the call then refuses to record the outcome
// ("the business function ended the transaction").

// openSQLDB returns the Store's *sql.DB over pool. Closing it does not
// close pool.
func openSQLDB(pool *pgxpool.Pool) *sql.DB {
	db := sql.OpenDB(ownedConnector{stdlib.GetPoolConnector(pool)})
	db.SetMaxIdleConns(0) // every connection goes back to the pool at once
	return db
}

// ownedConnector makes the connections of the Store's *sql.DB.
type ownedConnector struct{ driver.Connector }

func (c ownedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(*stdlib.Conn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("idempg: stdlib connector returned a %T", conn)
	}
	return ownedConn{sc}, nil
}

// ownedConn is a stdlib.Conn whose transactions are begun by idem
// (lazyTx) on its *pgx.Conn: BeginTx sends nothing and returns an
// ownedTx of the transaction already open. Everything else is stdlib's.
type ownedConn struct{ *stdlib.Conn }

func (c ownedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c ownedConn) BeginTx(ctx context.Context, _ driver.TxOptions) (driver.Tx, error) {
	if c.Conn.Conn().PgConn().TxStatus() == 'I' {
		return nil, errors.New("idempg: no transaction is open on the connection")
	}
	return ownedTx{c.Conn.Conn()}, nil
}

// ownedTx is the driver.Tx of the *sql.Tx a business function gets.
type ownedTx struct{ conn *pgx.Conn }

// Commit refuses: the transaction commits with the outcome. It rolls the
// transaction back so that nothing of it can commit without the business
// code's knowing.
func (t ownedTx) Commit() error {
	_ = t.Rollback()
	return fmt.Errorf("idempg: %w", registry.ErrTxOwned)
}

// Rollback rolls back the transaction if it is still open; after idem
// ended it (committed or rolled back) it does nothing.
func (t ownedTx) Rollback() error {
	if t.conn.IsClosed() || t.conn.PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := t.conn.Exec(context.Background(), "rollback")
	return err
}

// SQLTx returns the transaction as a *sql.Tx on the same connection
// (see above). It must be asked for before the transaction's first
// statement through t (else an error wrapping registry.ErrNoSQLTx): it
// takes the connection through the Store's *sql.DB and begins the
// transaction (with ExecuteOnce's claim) at once. A failure to begin is
// returned and reported by the call as a failed BEGIN is.
func (t *lazyTx) SQLTx() (*sql.Tx, error) {
	switch {
	case t.stx != nil:
		return t.stx, nil
	case t.err != nil:
		return nil, t.err
	case t.conn != nil && t.sqlConn == nil:
		return nil, fmt.Errorf("idempg: %w: ask for it before the transaction's first statement", registry.ErrNoSQLTx)
	}
	if t.conn == nil {
		if err := t.acquireSQL(t.ctx); err != nil {
			return nil, err
		}
	}
	if !t.begun {
		if err := t.beginAlone(t.ctx); err != nil {
			return nil, err
		}
	}
	// Under WithoutCancel: database/sql would otherwise roll the *sql.Tx
	// back from a goroutine of its own when ctx ends, on a connection
	// this call is using.
	stx, err := t.sqlConn.BeginTx(context.WithoutCancel(t.ctx), nil)
	if err != nil {
		t.err = fmt.Errorf("idempg: begin: %w", translate(err))
		return nil, t.err
	}
	t.stx = stx
	return stx, nil
}

// acquireSQL takes the connection through the Store's *sql.DB, so that
// SQLTx can hand a *sql.Tx on it.
func (t *lazyTx) acquireSQL(ctx context.Context) error {
	sc, err := t.sqlDB.Conn(ctx)
	if err != nil {
		t.err = fmt.Errorf("idempg: begin: %w", translate(err))
		return t.err
	}
	err = sc.Raw(func(dc any) error {
		t.conn = dc.(ownedConn).Conn.Conn()
		return nil
	})
	if err != nil {
		_ = sc.Close()
		t.err = fmt.Errorf("idempg: begin: %w", translate(err))
		return t.err
	}
	t.sqlConn = sc
	return nil
}

// beginAlone sends BEGIN, and the claim if any, in one batch.
func (t *lazyTx) beginAlone(ctx context.Context) error {
	batch := &pgx.Batch{}
	batch.Queue("begin")
	if t.claim != nil {
		batch.Queue(queries.Get("ClaimScope"), t.claim...)
	}
	results := t.conn.SendBatch(ctx, batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		t.err = fmt.Errorf("idempg: begin: %w", translate(err))
		return t.err
	}
	t.begun = true
	if t.claim != nil {
		if _, err := results.Exec(); err != nil {
			return t.claimFailed(err)
		}
	}
	return nil
}

// SQLTx: a caller's pgx.Tx has no *sql.Tx (ClaimAndExecuteSQL takes one).
func (a txAdapter) SQLTx() (*sql.Tx, error) {
	return nil, fmt.Errorf("idempg: %w: the transaction is a pgx.Tx (ClaimAndExecuteSQL takes a *sql.Tx)", registry.ErrNoSQLTx)
}
