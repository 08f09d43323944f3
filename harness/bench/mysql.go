package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/idemmysql"
)

// newMySQLDatabase creates a database named idem_bench_<time>_<random> on
// the server of dsn (a mysql:// URL naming any database the user can
// connect to; the user needs CREATE and DROP) and returns dsn naming it
// instead, so every table of the run lives there. drop removes it with
// everything in it. ctx governs the creation.
func newMySQLDatabase(ctx context.Context, dsn string) (*freshDB, error) {
	base, params, _ := strings.Cut(strings.TrimPrefix(dsn, "mysql://"), "?")
	slash := strings.LastIndex(base, "/")
	if slash < 0 {
		return nil, fmt.Errorf("bench: the MySQL DSN names no database")
	}
	cfg, err := idemmysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	name := fmt.Sprintf("idem_bench_%s_%s", time.Now().UTC().Format("20060102150405"), hex.EncodeToString(rnd[:]))
	exec := func(ctx context.Context, stmt string) error {
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			return err
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		_, err = db.ExecContext(ctx, stmt)
		return err
	}
	if err := exec(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		return nil, fmt.Errorf("bench: creating database %s: %w", name, err)
	}
	fresh := "mysql://" + base[:slash+1] + name
	if params != "" {
		fresh += "?" + params
	}
	return &freshDB{kind: "mysql", dsn: fresh, where: "database " + name,
		drop: func(ctx context.Context) error { return exec(ctx, "DROP DATABASE `"+name+"`") }}, nil
}
