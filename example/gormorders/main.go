// Command gormorders is a small order service written with GORM whose
// POST /orders is made idempotent by idemhttp: the order GORM writes and
// the outcome idem records commit in one transaction, the *sql.Tx of
// idemhttp.SQLTx, or not at all. A retry with the same Idempotency-Key
// gets the stored answer back; the handler does not run again.
//
//	gormorders -db postgres://…  (or mysql://USER:PASSWORD@HOST:PORT/DB)
//	curl -H 'X-User: ann' -H 'Idempotency-Key: 5b0c…' -d '{"sku":"A-1","qty":2}' http://ADDR/orders
//
// GORM is given the request's *sql.Tx as its connection
// (postgres.Config{Conn: tx}, mysql.Config{Conn: tx}) and never commits
// it: idem does, with the outcome. On PostgreSQL that *sql.Tx runs
// through pgx's stdlib driver on the very server transaction of idem's
// record. SQLite is not offered: GORM's SQLite driver needs cgo (the
// sqlxorders example runs on SQLite too).
//
// By default the operation runs in the one-transaction style
// (Operation.OneTransaction: nothing is in flight in the registry, a crash
// leaves neither the order nor the record); -two-phase reserves the
// operation first. The process prints "listening on ADDR" once it serves.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// Order is the business row.
type Order struct {
	ID  string `gorm:"primaryKey" json:"id"`
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	dsn := flag.String("db", "", "the database: postgres://… or mysql://…")
	addr := flag.String("addr", "127.0.0.1:8080", "the address to listen on")
	twoPhase := flag.Bool("two-phase", false, "reserve the operation first instead of the one-transaction style")
	flag.Parse()
	ctx := context.Background()

	kind := idemstore.Kind(*dsn)
	if kind != "postgres" && kind != "mysql" {
		return errors.New("gormorders: -db must be postgres://… or mysql://… (GORM's SQLite driver needs cgo)")
	}
	store, err := idemstore.Open(ctx, *dsn, idemstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := createTable(ctx, store, kind); err != nil {
		return err
	}
	op := idemhttp.Operation{Name: "orders.create", APIRevision: "v1", OneTransaction: !*twoPhase}
	mw, err := idemhttp.New(ctx, store, op, user, idemhttp.Options{})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(createOrder(kind)))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "gormorders listening on %s\n", ln.Addr())
	return http.Serve(ln, mux)
}

// createOrder writes the order with GORM through the request's *sql.Tx.
func createOrder(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := idemhttp.SQLTx(ctx) // before any other statement of the request
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		db, err := gorm.Open(dialector(kind, tx), &gorm.Config{
			SkipDefaultTransaction: true, // tx is the transaction; GORM must not open its own
			Logger:                 logger.Discard,
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		var in struct {
			SKU string `json:"sku"`
			Qty int    `json:"qty"`
		}
		if err := json.Unmarshal(idemhttp.Payload(ctx), &in); err != nil || in.SKU == "" || in.Qty <= 0 {
			http.Error(w, `want {"sku":"…","qty":N>0}`, http.StatusUnprocessableEntity)
			return
		}
		order := Order{ID: idemhttp.OperationID(ctx), SKU: in.SKU, Qty: in.Qty}
		if err := db.WithContext(ctx).Create(&order).Error; err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(order)
	}
}

// dialector hands GORM the *sql.Tx as its connection.
func dialector(kind string, tx *sql.Tx) gorm.Dialector {
	if kind == "mysql" {
		return mysql.New(mysql.Config{Conn: tx, SkipInitializeWithVersion: true})
	}
	return postgres.New(postgres.Config{Conn: tx})
}

// createTable creates the orders table if it does not exist.
func createTable(ctx context.Context, store registry.Store, kind string) error {
	ddl := `CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, sku text NOT NULL, qty integer NOT NULL)`
	if kind == "mysql" {
		ddl = `CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) PRIMARY KEY, sku VARCHAR(64) NOT NULL, qty INT NOT NULL)`
	}
	return store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, ddl)
		return err
	})
}

// user authenticates a request by its X-User header (an example: a real
// service verifies a token).
func user(r *http.Request) (idem.Identity, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return idem.Identity{Tenant: "shop", Principal: u}, nil
	}
	return idem.Identity{}, errors.New("no X-User")
}
