package idemmysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed queries.sql
var queryFiles embed.FS

// queries holds the named statements of queries.sql.
var queries = sqlfile.MustLoad(queryFiles, "queries.sql")

// Options configures a Store. The zero value is ready to use: database
// time, durable settings required, the default logger.
type Options struct {
	// Now, when set, supplies "now" for every statement in place of the
	// database clock, as long as it returns a non-zero time; a zero time
	// means database time for that call. It is called on every operation,
	// possibly from several goroutines at once, so it must be safe for
	// concurrent use. nil means database time.
	Now func() time.Time
	// Sealer, when set, encrypts the response bodies and outbox payloads
	// the Store keeps (registry.Sealer; package keyring). nil keeps them
	// in plaintext.
	Sealer registry.Sealer
	// AllowWeakDurability lets Open accept a server whose commits are not
	// durable when they return (innodb_flush_log_at_trx_commit other than
	// 1, or binary logging on with sync_binlog other than 1): Open then
	// logs an error through Logger for every weak setting instead of
	// refusing. false (the default) refuses such a server with
	// ErrWeakDurability. See durability.go.
	AllowWeakDurability bool
	// Logger receives the warnings Open writes; nil means slog.Default().
	Logger *slog.Logger
}

// Store is the MySQL/MariaDB registry.Store. It is safe for concurrent use
// by multiple goroutines. Create it with Open or OpenDB; the zero Store is
// not usable.
type Store struct {
	db     *sql.DB
	now    func() time.Time // nil: database time
	sealer registry.Sealer  // Options.Sealer, may be nil
	ownsDB bool             // Close closes db (Open), or leaves it (OpenDB)
	closed atomic.Bool
}

var _ registry.Store = (*Store)(nil)

// errClosed is returned, wrapped in registry.ErrUnavailable, by every
// method called after Close.
var errClosed = errors.New("idemmysql: store is closed")

// OpenDB checks the server's durability settings (see Open), applies the
// embedded migrations (see Migrate) and returns a Store on db. The caller
// keeps ownership of db: Store.Close does not close it. db must come from
// a Config prepared by Config (clientFoundRows, READ COMMITTED sessions,
// UTC, strict SQL mode) — Open does that. db's *sql.Tx does not refuse
// a business function's Commit (registry.ErrTxOwned, internal/ownedtx): only
// Open's connections do. ctx governs the checks and the migration.
func OpenDB(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("idemmysql: OpenDB: nil *sql.DB")
	}
	s := &Store{db: db, now: opts.Now, sealer: opts.Sealer}
	if err := checkDurability(ctx, db, opts); err != nil {
		return nil, err
	}
	if err := checkSession(ctx, db); err != nil {
		return nil, err
	}
	if err := migrate(ctx, db, s.nowParam()); err != nil {
		return nil, err
	}
	return s, nil
}

// DB returns the database the Store works on, for callers of the
// in-transaction style: begin the transaction that ClaimAndExecute takes
// on it.
func (s *Store) DB() *sql.DB { return s.db }

// Close marks the Store closed — later calls fail with
// registry.ErrUnavailable — and closes the database if Open opened it. It
// is safe to call more than once.
func (s *Store) Close() {
	if s.closed.Swap(true) {
		return
	}
	if s.ownsDB {
		_ = s.db.Close()
	}
}

// checkOpen returns an ErrUnavailable error once the Store is closed.
func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, errClosed)
	}
	return nil
}

// clock returns the injected time, or the zero time for database time.
func (s *Store) clock() time.Time {
	if s.now == nil {
		return time.Time{}
	}
	return s.now()
}

// nowParam returns the "now" argument ($1) of the queries: the injected
// time in microseconds, or nil (NULL) for database time.
func (s *Store) nowParam() any {
	if t := s.clock(); !t.IsZero() {
		return t.UnixMicro()
	}
	return nil
}

// stamp returns the "now" argument of a statement and the time to stamp
// a new operation ID with, from one reading of the clock.
func (s *Store) stamp() (now any, idAt time.Time) {
	t := s.clock()
	if t.IsZero() {
		return nil, time.Now()
	}
	return t.UnixMicro(), t
}

// querier is *sql.DB, *sql.Tx or *sql.Conn.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// exec runs the named query (or, with raw, the SQL text) with $N
// arguments on q and returns the rows it matched.
func exec(ctx context.Context, q querier, query string, args ...any) (int64, error) {
	text, args, err := bind(query, args)
	if err != nil {
		return 0, err
	}
	res, err := q.ExecContext(ctx, text, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs a $N query expected to return one row.
func queryRow(ctx context.Context, q querier, query string, args ...any) scanner {
	text, args, err := bind(query, args)
	if err != nil {
		return errRow{err}
	}
	return q.QueryRowContext(ctx, text, args...)
}

// queryRows runs a $N query.
func queryRows(ctx context.Context, q querier, query string, args ...any) (*sql.Rows, error) {
	text, args, err := bind(query, args)
	if err != nil {
		return nil, err
	}
	return q.QueryContext(ctx, text, args...)
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
