// Command sqlxorders is a small order service written with sqlx whose
// POST /orders is made idempotent by idemhttp: the order sqlx writes and
// the outcome idem records commit in one transaction, the *sql.Tx of
// idemhttp.SQLTx, or not at all. A retry with the same Idempotency-Key
// gets the stored answer back; the handler does not run again.
//
//	sqlxorders -db sqlite:orders.db  (or postgres://…, mysql://USER:PASSWORD@HOST:PORT/DB)
//	curl -H 'X-User: ann' -H 'Idempotency-Key: 5b0c…' -d '{"sku":"A-1","qty":2}' http://ADDR/orders
//
// sqlx wraps the request's *sql.Tx (boundTx: a *sqlx.Tx told the
// database's placeholders) and never commits it: idem does, with the
// outcome. On PostgreSQL that *sql.Tx runs through pgx's stdlib driver on
// the very server transaction of idem's record.
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
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/jmoiron/sqlx/reflectx"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// Order is the business row.
type Order struct {
	ID  string `db:"id" json:"id"`
	SKU string `db:"sku" json:"sku"`
	Qty int    `db:"qty" json:"qty"`
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	dsn := flag.String("db", "", "the database: sqlite:PATH, postgres://… or mysql://…")
	addr := flag.String("addr", "127.0.0.1:8080", "the address to listen on")
	twoPhase := flag.Bool("two-phase", false, "reserve the operation first instead of the one-transaction style")
	flag.Parse()
	ctx := context.Background()

	kind := idemstore.Kind(*dsn)
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
	fmt.Fprintf(os.Stdout, "sqlxorders listening on %s\n", ln.Addr())
	return http.Serve(ln, mux)
}

// createOrder writes the order with sqlx through the request's *sql.Tx.
func createOrder(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		stx, err := idemhttp.SQLTx(ctx) // before any other statement of the request
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		tx := newBoundTx(stx, kind)
		var in struct {
			SKU string `json:"sku"`
			Qty int    `json:"qty"`
		}
		if err := json.Unmarshal(idemhttp.Payload(ctx), &in); err != nil || in.SKU == "" || in.Qty <= 0 {
			http.Error(w, `want {"sku":"…","qty":N>0}`, http.StatusUnprocessableEntity)
			return
		}
		order := Order{ID: idemhttp.OperationID(ctx), SKU: in.SKU, Qty: in.Qty}
		if _, err := sqlx.NamedExecContext(ctx, tx, `INSERT INTO orders (id, sku, qty) VALUES (:id, :sku, :qty)`, order); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// Read back through the same transaction, as sqlx code does.
		var stored Order
		if err := sqlx.GetContext(ctx, tx, &stored, tx.Rebind(`SELECT id, sku, qty FROM orders WHERE id = ?`), order.ID); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(stored)
	}
}

// boundTx is a *sqlx.Tx over idem's *sql.Tx that knows the database's
// placeholders: sqlx keeps a Tx's driver name unexported (only Beginx
// sets it), so DriverName, Rebind and BindNamed are given here.
type boundTx struct {
	*sqlx.Tx
	driver string
}

func newBoundTx(tx *sql.Tx, kind string) boundTx {
	driver := map[string]string{"postgres": "pgx", "mysql": "mysql", "sqlite": "sqlite3"}[kind]
	return boundTx{&sqlx.Tx{Tx: tx, Mapper: reflectx.NewMapperFunc("db", strings.ToLower)}, driver}
}

func (t boundTx) DriverName() string { return t.driver }

func (t boundTx) Rebind(query string) string { return sqlx.Rebind(sqlx.BindType(t.driver), query) }

func (t boundTx) BindNamed(query string, arg any) (string, []any, error) {
	return sqlx.BindNamed(sqlx.BindType(t.driver), query, arg)
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
