package idempg

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed queries.sql
var queryFS embed.FS

// queries holds the named statements of queries.sql.
var queries = sqlfile.MustLoad(queryFS, "queries.sql")

// Options configures a Store. The zero value is ready to use: database
// time, pool settings from the DSN.
type Options struct {
	// Now, when set and returning a non-zero time, is used as "now" by
	// every statement in place of database time, and for the timestamp of
	// new operation IDs. It is called once per Store call, possibly from
	// many goroutines at once, so it must be safe for concurrent use; it
	// may change its answer at any time (tests swap the clock through it).
	// nil, or a zero result, means database time (statement_timestamp())
	// and time.Now for operation IDs.
	Now func() time.Time
	// LaneConns is the size of the acceptance lane: a second, small pool
	// that serves only the short single statements of the acceptance
	// point (Reserve, Get, GetByID, Release). Without it a reservation
	// waits for a connection that other requests hold across their whole
	// business transaction. 0 means DefaultLaneConns; negative turns the
	// lane off (everything uses the main pool).
	LaneConns int
	// Sealer, when set, encrypts the bodies the Store keeps — response
	// snapshots, effect requests and answers — with the scope or effect as
	// associated data (registry.Sealer; package keyring). nil keeps them in
	// plaintext. Bodies stored under another key stay readable while the
	// Sealer holds it; Reseal moves them to its active key.
	Sealer registry.Sealer
	// NoListen turns off the Store's LISTEN connection (Store.Watch):
	// every Watch then returns a nil channel and a waiter (Prefer: wait)
	// polls the registry. Set it when the Store reaches PostgreSQL through
	// a pooler in transaction mode (PgBouncer's pool_mode = transaction),
	// which cannot keep a LISTEN: the listener's LISTEN would run on a
	// server connection handed on to other clients, so no wake-up would
	// arrive and waiters would poll at the slower fallback pace meant for
	// missed wake-ups (up to 1 s instead of 250 ms), with a connection
	// wasted. false, the default, opens the listener on the first Watch.
	NoListen bool
	// TCPUserTimeout bounds how long data sent to the database may stay
	// unacknowledged before the connection is dropped (the socket option
	// TCP_USER_TIMEOUT, Linux only): what bounds a COMMIT to a host that
	// vanished, since a COMMIT is waited for whatever the caller's
	// context does (network.go). 0 means DefaultTCPUserTimeout (30 s);
	// negative leaves the system's default (about 15 minutes on Linux).
	TCPUserTimeout time.Duration
}

// DefaultLaneConns is the acceptance lane's size when Options.LaneConns is 0.
const DefaultLaneConns = 2

// Store is the PostgreSQL registry.Store. Make one with Open; the zero
// Store is not usable. It is safe for concurrent use by any number of
// goroutines and processes sharing the database; each method's ctx
// governs only that call (acquiring a connection and the statements) —
// but never ends a COMMIT once sent: a COMMIT is waited for (commit.go,
// Options.TCPUserTimeout). The statement Complete and ExecuteOnce send
// with their COMMIT stops waiting for locks at ctx's deadline, not at its
// cancellation (a transaction-local lock_timeout; lazytx.go).
type Store struct {
	pool *pgxpool.Pool
	lane *pgxpool.Pool // the acceptance lane (Options.LaneConns); pool when off
	// sqlDB is pool seen through database/sql, for registry.SQLTx
	// (sqltx.go); it holds no connection of its own.
	sqlDB *sql.DB
	// closed is set by Close (InTx checks it before running its fn).
	closed atomic.Bool
	now    func() time.Time // Options.Now, may be nil
	// sealer is Options.Sealer, may be nil.
	sealer registry.Sealer
	// listener serves Watch (watch.go); nil with Options.NoListen.
	listener *listener
	// prepares: the pool's connections run in pgx's default mode, which
	// prepares and caches named statements (runLazy describes its last
	// statement first; lazytx.go).
	prepares bool
}

var _ registry.Store = (*Store)(nil)

// Open connects to the database named by dsn, applies the migrations that
// are not yet applied (see Migrate) and returns the Store. dsn is a pgx
// connection string (URL or key=value); pool settings come from its
// pool_* parameters, e.g. pool_max_conns (default: the greater of 4 and
// runtime.NumCPU()); statements are prepared and cached per connection
// unless the DSN sets default_query_exec_mode. A DSN may name several
// hosts ("postgres://h1:5432,h2:5432/db?target_session_attrs=read-write"):
// every new connection tries them in order and keeps the first that
// accepts writes, so after a failover the pool reaches the new primary by
// itself (connections to the old one fail, are dropped, and calls answer
// registry.ErrUnavailable until then).
//
// One parameter is idem's own and is removed before the DSN reaches the
// server: idem_pooler=transaction says the DSN leads to a pooler in
// transaction mode (PgBouncer's pool_mode = transaction), which hands a
// server connection to another client after every transaction. The
// Store then keeps nothing on a connection beyond a transaction:
// statements are not prepared by name (default_query_exec_mode=exec,
// unless the DSN names another mode than the default cache_statement)
// and there is no LISTEN connection (as with Options.NoListen).
// idem_pooler=session, or no parameter, changes nothing: a pooler in
// session mode keeps one server connection per client connection.
//
// ctx governs connecting and migrating only; the pool lives until Close.
// An unreachable database is an error wrapping registry.ErrUnavailable.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("idempg: %w", err)
	}
	if err := applyPooler(cfg, &opts); err != nil {
		return nil, err
	}
	applyTCPUserTimeout(&cfg.ConnConfig.Config, cmp.Or(opts.TCPUserTimeout, DefaultTCPUserTimeout))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("idempg: %w", translate(err))
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	lane := pool
	if n := cmp.Or(opts.LaneConns, DefaultLaneConns); n > 0 {
		laneCfg := cfg.Copy()
		laneCfg.MaxConns, laneCfg.MinConns = int32(n), 0
		if lane, err = pgxpool.NewWithConfig(ctx, laneCfg); err != nil {
			pool.Close()
			return nil, fmt.Errorf("idempg: %w", translate(err))
		}
	}
	st := &Store{pool: pool, lane: lane, sqlDB: openSQLDB(pool), now: opts.Now, sealer: opts.Sealer,
		prepares: cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement}
	if !opts.NoListen {
		st.listener = newListener(cfg.ConnConfig)
	}
	return st, nil
}

// Close stops the LISTEN connection (Watch), if one was opened, waking
// every watcher, then closes the pools, waiting for connections in use to
// be returned. The Store must not be used afterwards.
func (s *Store) Close() {
	s.closed.Store(true)
	if s.listener != nil {
		s.listener.close()
	}
	if s.lane != s.pool {
		s.lane.Close()
	}
	_ = s.sqlDB.Close() // its connections are the pool's
	s.pool.Close()
}

// Pool returns the Store's connection pool, for callers of ClaimAndExecute
// that want to begin their transaction on it. Closing it closes the Store.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// clock returns the "now" parameter of a statement — the injected time in
// UTC, or nil for database time — and the time to stamp operation IDs with.
func (s *Store) clock() (param *time.Time, goNow time.Time) {
	if s.now != nil {
		if t := s.now(); !t.IsZero() {
			t = t.UTC()
			return &t, t
		}
	}
	return nil, time.Now()
}

// micros converts d to whole microseconds, PostgreSQL's time resolution.
func micros(d time.Duration) int64 { return d.Microseconds() }
