package idemmysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"

	"github.com/idemkit/idem/registry"
)

// A transaction the Store hands to business code (Complete, ExecuteOnce,
// InTx) is the Store's to commit: its *sql.Tx reaches the business code
// through Native and registry.SQLTx, and a Commit there would commit the
// business rows — and, in the one-transaction style, the claim — without
// the outcome. Such a transaction is begun with ownedCtx: the
// connection's BeginTx (gate.go) wraps its driver.Tx in an ownedTx,
// whose Commit refuses (registry.ErrTxOwned) and rolls back until the
// Store, about to commit, calls commitOwned. The Store's own later
// statements then fail (sql.ErrTxDone), so nothing is recorded. Only the
// Store's own connections (Open) carry the guard; a *sql.DB of the
// caller's (OpenDB) does not.

// ownedKey is the context key of an *owned.
type ownedKey struct{}

// owned is the Store's permission to commit one transaction.
type owned struct{ commit atomic.Bool }

// ownedCtx returns ctx marked so that the transaction begun with it is
// the Store's to commit, and the permission to give before committing.
func ownedCtx(ctx context.Context) (context.Context, *owned) {
	o := &owned{}
	return context.WithValue(ctx, ownedKey{}, o), o
}

// commitOwned commits tx, begun with o's context, as the Store.
func commitOwned(tx *sql.Tx, o *owned) error {
	o.commit.Store(true)
	return tx.Commit()
}

// ownedTx is a driver.Tx the Store handed to business code.
type ownedTx struct {
	driver.Tx
	o *owned
}

// guardOwned wraps tx when ctx says the Store owns it.
func guardOwned(ctx context.Context, tx driver.Tx) driver.Tx {
	if o, ok := ctx.Value(ownedKey{}).(*owned); ok {
		return &ownedTx{Tx: tx, o: o}
	}
	return tx
}

// Commit commits only with the Store's permission; otherwise it rolls
// back and returns an error wrapping registry.ErrTxOwned.
func (t *ownedTx) Commit() error {
	if !t.o.commit.Load() {
		_ = t.Tx.Rollback()
		return fmt.Errorf("idemmysql: %w", registry.ErrTxOwned)
	}
	return t.Tx.Commit()
}

// ownedConnector makes the connections of a Store that Open opened: the
// driver's, with BeginTx guarded for owned transactions.
type ownedConnector struct{ driver.Connector }

func (c ownedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(mysqlConn)
	if !ok { // not the driver's connection as this file knows it: no guard
		return conn, nil
	}
	return &ownedConn{inner}, nil
}

// mysqlConn is what database/sql uses of a go-sql-driver/mysql
// connection; ownedConn passes all of it on.
type mysqlConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// ownedConn is a driver connection whose transactions begun with
// ownedCtx are guarded (ownedTx).
type ownedConn struct{ mysqlConn }

func (c *ownedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *ownedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.mysqlConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return guardOwned(ctx, tx), nil
}
