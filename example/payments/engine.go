package payments

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemkit/idem/registry"
)

// The engines the service's statements are written for (Config.Database).
const (
	dbPostgres = "postgres"
	dbSQLite   = "sqlite"
	dbMySQL    = "mysql"
)

// tables are the DDL statements of payments.sql createTables runs, by
// engine, in order. MySQL's tables carry their indexes (CREATE INDEX has
// no IF NOT EXISTS there) and refunded_minor from the start: no MySQL
// table predates refunds.
var tables = map[string][]string{
	dbPostgres: {"create_payments", "create_payments_owner_index", "refunded", "create_refunds", "create_refunds_payment_index"},
	dbSQLite:   {"create_payments", "create_payments_owner_index", "refunded", "create_refunds", "create_refunds_payment_index"},
	dbMySQL:    {"create_payments_mysql", "create_refunds_mysql"},
}

// createTables runs the DDL of payments.sql for the engine db names
// (Config.Database; "" is told by the transaction's type) in one
// transaction, adding the refunded total to a payments table created
// before refunds existed, and returns the engine. Several instances may
// start at once: on PostgreSQL two concurrent CREATE TABLE IF NOT EXISTS
// can still collide in the catalog, and the loser fails only after the
// winner committed, so a retry finds the table. (MySQL commits each DDL
// statement at once; its CREATE TABLE IF NOT EXISTS does not collide.)
func createTables(ctx context.Context, store registry.Store, db string) (string, error) {
	if db != "" && tables[db] == nil {
		return "", fmt.Errorf("payments: unknown Config.Database %q: want postgres, sqlite or mysql", db)
	}
	var err error
	for range 3 {
		err = store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
			if db == "" {
				db = dbPostgres
				if _, ok := tx.Native().(*sql.Tx); ok {
					db = dbSQLite
				}
			}
			for _, q := range tables[db] {
				if q == "refunded" {
					if err := addRefundedColumn(ctx, tx, db); err != nil {
						return err
					}
					continue
				}
				if _, err := tx.Exec(ctx, queries.Get(q)); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("payments: creating tables: %w", err)
	}
	return db, nil
}

// addRefundedColumn adds payments.refunded_minor where it is missing (a
// table created before refunds existed), with the statements of engine
// db (PostgreSQL or SQLite).
func addRefundedColumn(ctx context.Context, tx registry.Tx, db string) error {
	var n int
	if err := tx.QueryRow(ctx, queries.Get("payments_has_refunded_"+db)).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := tx.Exec(ctx, queries.Get("add_payments_refunded_"+db))
	return err
}
