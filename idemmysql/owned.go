package idemmysql

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/idemkit/idem/internal/ownedtx"
)

// The Store's transactions are its own to commit (internal/ownedtx):
// only the connections of Open carry the guard; a *sql.DB of the caller's
// (OpenDB) does not.

// ownedConnector makes the connections of a Store that Open opened: the
// driver's, with BeginTx guarded for owned transactions.
type ownedConnector struct{ driver.Connector }

func (c ownedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(mysqlConn)
	if !ok { // fail closed: without the guard a *sql.Tx could commit without the outcome
		conn.Close()
		return nil, fmt.Errorf("idemmysql: the driver's connection is a %T, not one the commit guard knows", conn)
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
// ownedtx.Context are guarded.
type ownedConn struct{ mysqlConn }

func (c *ownedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *ownedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.mysqlConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return ownedtx.Guard(ctx, tx), nil
}
