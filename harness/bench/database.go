package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/registry"
)

// freshDB is the run's own database: the DSN every variant uses and how
// to remove it afterwards.
type freshDB struct {
	kind  string // "postgres", "mysql" or "sqlite"
	dsn   string // the DSN the store is opened with
	where string // the schema or file, for messages
	// conn configures a connection outside the store's pool (the WAL
	// meter's); nil on SQLite and MySQL.
	conn *pgx.ConnConfig
	drop func(ctx context.Context) error
	keep bool // Config.Keep: release does not drop it
}

// newFreshDB creates the run's database from the user's DSN: a new schema
// on PostgreSQL, a new database on MySQL/MariaDB (newMySQLDatabase), a
// new file on SQLite. ctx governs the creation.
func newFreshDB(ctx context.Context, dsn string) (*freshDB, error) {
	switch idemstore.Kind(dsn) {
	case "postgres":
		return newSchema(ctx, dsn)
	case "sqlite":
		return newFile(dsn)
	case "mysql":
		return newMySQLDatabase(ctx, dsn)
	}
	return nil, errors.New("bench: unknown database kind")
}

// newSchema creates a schema named idem_bench_<time>_<random> and returns
// dsn with search_path set to it, so every table of the run (registry,
// payments, outbox) lives there. drop removes it with everything in it.
func newSchema(ctx context.Context, dsn string) (*freshDB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, errors.New("bench: the PostgreSQL DSN is not a URL")
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	schema := fmt.Sprintf("idem_bench_%s_%s", time.Now().UTC().Format("20060102150405"), hex.EncodeToString(rnd[:]))
	ident := pgx.Identifier{schema}.Sanitize()
	// pgxpool's parser, not pgx's: the DSN may carry pool_* parameters,
	// which a plain connection would send to the server as settings.
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return nil, fmt.Errorf("bench: creating schema %s: %w", schema, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return &freshDB{kind: "postgres", dsn: u.String(), where: "schema " + schema, conn: cfg.ConnConfig.Copy(),
		drop: func(ctx context.Context) error { return exec(ctx, "DROP SCHEMA "+ident+" CASCADE") }}, nil
}

// newFile checks that the SQLite file of dsn does not exist yet; the
// driver creates it. drop removes it with its WAL and shared-memory files.
func newFile(dsn string) (*freshDB, error) {
	path, _, _ := strings.Cut(strings.TrimPrefix(dsn, "sqlite:"), "?")
	if path == "" {
		return nil, errors.New("bench: empty SQLite path")
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("bench: %s exists; the benchmark needs a fresh database file", path)
	}
	return &freshDB{kind: "sqlite", dsn: dsn, where: "file " + path, drop: func(context.Context) error {
		var errs []error
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}}, nil
}

// workIn makes the fresh database of a run (Config.DSN) and opens the
// registry in it. The caller defers db.release with the run's error.
func (cfg Config) workIn(ctx context.Context) (*freshDB, registry.Store, error) {
	db, err := newFreshDB(ctx, cfg.DSN)
	if err != nil {
		return nil, nil, err
	}
	db.keep = cfg.Keep
	if cfg.Keep {
		fmt.Fprintf(cfg.Progress, "bench: working in %s (kept)\n", db.where)
	}
	store, err := idemstore.Open(ctx, db.dsn, idemstore.Options{})
	if err != nil {
		db.release(ctx, nil, &err)
		return nil, nil, err
	}
	return db, store, nil
}

// release closes store (if any) and removes the database unless it is
// kept, joining a failure to remove it to *err.
func (d *freshDB) release(ctx context.Context, store registry.Store, err *error) {
	if store != nil {
		store.Close()
	}
	if d.keep {
		return
	}
	if derr := d.drop(context.WithoutCancel(ctx)); derr != nil {
		*err = errors.Join(*err, fmt.Errorf("bench: removing %s: %w", d.where, derr))
	}
}
