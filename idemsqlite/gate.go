package idemsqlite

import (
	"context"
	"database/sql/driver"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/ownedtx"
)

// gateWait bounds how long a write transaction queues at the gate before
// it goes to SQLite's busy handler anyway (the busy timeout of Open). It is
// long because queueing here is fair and SQLite's polling is not: on a
// loaded machine a burst of 100 writers can queue for more than 10 s, and
// a waiter that left the queue early then polled and timed out with
// SQLITE_BUSY although the lock was only ever busy with work. The caller's
// context bounds the wait as well (idem serve --store-timeout).
const gateWait = time.Minute

// gate queues the write transactions of one database opened by Open, in
// this process, first come first served. SQLite admits one writer at a
// time and makes the others poll (sleeps of up to 100 ms), which leaves
// the lock idle between polls and lets an unlucky waiter starve until its
// busy timeout expires; queueing in Go hands the lock straight to the
// next transaction. The gate is an optimisation, never a source of
// errors: a transaction that waited gateWait, or whose context ends,
// proceeds to BEGIN IMMEDIATE and SQLite decides.
//
// Only transactions begun through database/sql pass the gate; every write
// of the Store runs in one. Writes outside a transaction (db.Exec) and
// other processes still poll SQLite's lock, and under sustained write load
// from this process they find it free less often: they may wait up to the
// busy timeout and then fail with SQLITE_BUSY.
type gate chan struct{}

// enter waits for the gate and reports whether it holds it.
func (g gate) enter(ctx context.Context) bool {
	select {
	case g <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case g <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

func (g gate) leave() { <-g }

// gatedConnector makes the connections of a database share one gate.
type gatedConnector struct {
	driver.Connector
	gate gate
}

func (c *gatedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(sqliteConn)
	if !ok { // not modernc.org/sqlite as this file knows it: no gate
		return conn, nil
	}
	return &gatedConn{sqliteConn: inner, gate: c.gate}, nil
}

// sqliteConn is the method set of a modernc.org/sqlite connection that
// database/sql uses.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// gatedConn passes a modernc.org/sqlite connection through, except that
// its read-write transactions go through the gate.
type gatedConn struct {
	sqliteConn
	gate gate
}

// Begin is BeginTx with the background context.
func (c *gatedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins a transaction; a read-write one holds the gate until it
// ends.
func (c *gatedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts.ReadOnly {
		return c.sqliteConn.BeginTx(ctx, opts)
	}
	held := c.gate.enter(ctx)
	tx, err := c.sqliteConn.BeginTx(ctx, opts)
	if !held {
		if err != nil {
			return nil, err
		}
		return ownedtx.Guard(ctx, tx), nil
	}
	if err != nil {
		c.gate.leave()
		return nil, err
	}
	return ownedtx.Guard(ctx, &gatedTx{Tx: tx, leave: sync.OnceFunc(c.gate.leave)}), nil
}

// gatedTx leaves the gate when the transaction ends.
type gatedTx struct {
	driver.Tx
	leave func()
}

func (t *gatedTx) Commit() error {
	defer t.leave()
	return t.Tx.Commit()
}

func (t *gatedTx) Rollback() error {
	defer t.leave()
	return t.Tx.Rollback()
}
