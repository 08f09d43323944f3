package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
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
// time, no other settings.
type Options struct {
	// Now, when set, supplies "now" for every statement in place of the
	// database clock, as long as it returns a non-zero time; a zero time
	// means database time for that call. It is called on every operation,
	// possibly from several goroutines at once, so it must be safe for
	// concurrent use; to move time at runtime (tests), have it read an
	// atomic value. nil means database time.
	Now func() time.Time
	// Sealer, when set, encrypts the bodies the Store keeps — response
	// snapshots, effect requests and answers — with the scope or effect as
	// associated data (registry.Sealer; package keyring). nil keeps them in
	// plaintext. Bodies stored under another key stay readable while the
	// Sealer holds it; Reseal moves them to its active key.
	Sealer registry.Sealer
	// MaxBatch is how many concurrent ExecuteOnce calls one transaction
	// commits at most (group commit, see ExecuteOnce). Zero (or less) means
	// DefaultMaxBatch (64); 1 turns batching off: every call runs its own
	// transaction.
	MaxBatch int
}

// Store is the SQLite registry.Store. It is safe for concurrent use by
// multiple goroutines. Create it with Open or OpenDB; the zero Store is
// not usable.
type Store struct {
	db     *sql.DB
	now    func() time.Time // nil: database time
	sealer registry.Sealer  // Options.Sealer, may be nil
	ownsDB bool             // Close closes db (Open), or leaves it (OpenDB)
	stmts  map[string]*sql.Stmt
	closed atomic.Bool
	group  *committer // ExecuteOnce's group commit; nil when MaxBatch is 1
}

var _ registry.Store = (*Store)(nil)

// errClosed is returned, wrapped in registry.ErrUnavailable, by every
// method called after Close.
var errClosed = errors.New("idemsqlite: store is closed")

// OpenDB applies the embedded migrations to db (see Migrate) and returns a
// Store on it. The caller keeps ownership of db: Store.Close does not
// close it. db should be opened as Open does — modernc.org/sqlite with
// journal_mode WAL, a busy timeout and _txlock=immediate — otherwise
// concurrent writers may fail with SQLITE_BUSY (reported as
// registry.ErrUnavailable) instead of waiting their turn. Nor does db's
// *sql.Tx refuse a business function's Commit (registry.ErrTxOwned,
// internal/ownedtx): only Open's connections do. ctx governs the
// migration and the preparation of the Store's statements.
func OpenDB(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("idemsqlite: OpenDB: nil *sql.DB")
	}
	s := &Store{db: db, now: opts.Now, sealer: opts.Sealer}
	if err := migrate(ctx, db, s.nowParam()); err != nil {
		return nil, err
	}
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	if n := maxBatch(opts.MaxBatch); n > 1 {
		s.group = newCommitter(s, n)
	}
	return s, nil
}

// DB returns the database the Store works on, for callers of the
// in-transaction style: begin the transaction that ClaimAndExecute takes
// on it (BEGIN IMMEDIATE when the Store came from Open).
func (s *Store) DB() *sql.DB { return s.db }

// Close marks the Store closed — later calls fail with
// registry.ErrUnavailable — and closes the database if Open opened it. It
// is safe to call more than once. ExecuteOnce calls still queued for a
// batch fail at once with registry.ErrUnavailable, and so do the members
// of the batch in progress, whose transaction rolls back; Close waits for
// the business function running in that batch, if any, to return, so a
// business function must not call it.
func (s *Store) Close() {
	if s.closed.Swap(true) {
		return
	}
	if s.group != nil {
		s.group.stop()
	}
	_ = s.closeStmts()
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
