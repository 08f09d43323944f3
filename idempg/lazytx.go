package idempg

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/registry"
)

// lazyTx is the registry.Tx that Complete and ExecuteOnce hand their
// business function. It takes a pooled connection only when the first
// statement comes — so the handler's work before it (parsing,
// validation) holds no connection that other requests queue for — and
// opens the transaction together with that statement: BEGIN and the
// statement go to the server in one pipelined batch, so the business
// transaction costs no round trip of its own. (pgx has no deferred
// BEGIN: pgx.Conn.Begin waits for the server's answer before it returns
// the pgx.Tx.)
//
// Query's rows hold the connection until they are closed (or read to the
// end), as pgx's do.
//
// Native returns a real pgx.Tx. Asked before any statement, it begins the
// transaction the ordinary way; asked after, it sends one more BEGIN on
// the open transaction, which PostgreSQL answers with a warning and
// ignores, so that pgx has a pgx.Tx to hand out. Either way that pgx.Tx
// commits or rolls back the one transaction (and Complete then refuses to
// record the outcome: see Complete).
//
// With claim set (ExecuteOnce), the claim statement (ClaimScope) goes
// between BEGIN and the first statement, in the same batch: the
// transaction holds the scope's advisory lock before any business
// statement runs. When the claim is refused because the scope has a
// record (lost), the first statement is never executed (the server skips
// the rest of a batch after an error) and fails, and so does every later
// one: runLazy then reports the claim's error as the lost insert.
//
// A lazyTx belongs to one call and one goroutine at a time, like a
// pgx.Tx; release gives its connection back.
type lazyTx struct {
	ctx   context.Context // the call's, for Native's and SQLTx's BEGIN
	pool  *pgxpool.Pool
	sqlDB *sql.DB   // the Store's, for SQLTx (sqltx.go)
	conn  *pgx.Conn // nil until the first statement
	// pooled is conn's pool handle when conn came from the pool directly
	// (acquire); release gives it back, or closes sqlConn.
	pooled *pgxpool.Conn
	// sqlConn and stx are SQLTx's: the connection taken through sqlDB and
	// the business code's *sql.Tx on it; nil unless SQLTx was asked.
	sqlConn *sql.Conn
	stx     *sql.Tx
	begun   bool   // BEGIN was sent and succeeded
	tx      pgx.Tx // the native transaction, once Native made one
	err     error  // a failure to begin, reported by runLazy
	claim   []any  // ClaimScope's arguments; nil: no claim
	lost    error  // the claim's refusal (IDM02), reported by runLazy
}

// acquire takes the connection, once.
func (t *lazyTx) acquire(ctx context.Context) error {
	if t.conn != nil {
		return nil
	}
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		t.err = fmt.Errorf("idempg: begin: %w", translate(err))
		return t.err
	}
	t.conn, t.pooled = conn.Conn(), conn
	return nil
}

// release rolls back whatever is still open and gives the connection
// back. If the rollback fails, the pool destroys the connection on
// Release (it is not idle), which ends the transaction on the server.
// The *sql.Tx of SQLTx, if any, is ended too (its Rollback does nothing
// once the transaction is over).
func (t *lazyTx) release(ctx context.Context) {
	if t.conn == nil {
		return
	}
	if pc := t.conn.PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
		_, _ = t.conn.Exec(ctx, "rollback")
	}
	if t.stx != nil {
		_ = t.stx.Rollback()
	}
	if t.sqlConn != nil {
		_ = t.sqlConn.Close()
		return
	}
	t.pooled.Release()
}

var _ registry.Tx = (*lazyTx)(nil)

// ended refuses a statement once the transaction BEGIN opened was ended
// behind the store's back — by its *sql.Tx's Commit or Rollback, or a raw
// COMMIT — since on the connection it would run on its own and commit at
// once. It reads the connection's last ReadyForQuery status: no round
// trip.
func (t *lazyTx) ended() error {
	if t.conn.PgConn().TxStatus() == 'I' {
		return fmt.Errorf("idempg: %w: the transaction was ended through its *sql.Tx (Commit, Rollback or a COMMIT); nothing more runs in it", registry.ErrTxOwned)
	}
	return nil
}

func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if t.begun {
		if err := t.ended(); err != nil {
			return 0, err
		}
		tag, err := t.conn.Exec(ctx, sql, args...)
		if err != nil {
			return 0, err
		}
		return tag.RowsAffected(), nil
	}
	results, err := t.begin(ctx, sql, args)
	if err != nil {
		return 0, err
	}
	tag, err := results.Exec()
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) registry.Row {
	if t.begun {
		if err := t.ended(); err != nil {
			return errRow{err}
		}
		return t.conn.QueryRow(ctx, sql, args...)
	}
	results, err := t.begin(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{results}
}

func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (registry.Rows, error) {
	if t.begun {
		if err := t.ended(); err != nil {
			return nil, err
		}
		rows, err := t.conn.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return rows, nil
	}
	results, err := t.begin(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := results.Query()
	if err != nil {
		results.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, results: results}, nil
}

// begin sends BEGIN and the statement sql in one batch and reads BEGIN's
// answer; the caller reads the statement's and closes the results.
func (t *lazyTx) begin(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if err := t.acquire(ctx); err != nil {
		return nil, err
	}
	batch := &pgx.Batch{}
	batch.Queue("begin")
	if t.claim != nil {
		batch.Queue(queries.Get("ClaimScope"), t.claim...)
	}
	batch.Queue(sql, args...)
	results := t.conn.SendBatch(ctx, batch)
	if _, err := results.Exec(); err != nil {
		results.Close()
		// Nothing began, not even the statement: should fn go on
		// regardless, its outcome must not be recorded without it.
		t.err = fmt.Errorf("idempg: begin: %w", translate(err))
		return nil, t.err
	}
	t.begun = true
	if t.claim != nil {
		if _, err := results.Exec(); err != nil {
			results.Close()
			return nil, t.claimFailed(err)
		}
	}
	return results, nil
}

// claimFailed notes the claim's failure err and returns the error fn's
// statement gets: the scope's record was committed by another
// transaction (lost), or storage trouble (err, as a failed BEGIN).
func (t *lazyTx) claimFailed(err error) error {
	if isClaimed(err) {
		t.lost = err
		return fmt.Errorf("idempg: the operation was recorded by another transaction meanwhile: %w", err)
	}
	t.err = fmt.Errorf("idempg: claim: %w", translate(err))
	return t.err
}

func (t *lazyTx) Native() any {
	if t.tx == nil && t.err == nil {
		if t.acquire(t.ctx) != nil {
			return nil
		}
		// Inside a transaction begun lazily, this BEGIN changes nothing.
		tx, err := t.conn.Begin(t.ctx)
		if err != nil {
			t.err = fmt.Errorf("idempg: begin: %w", translate(err))
			return nil
		}
		wasBegun := t.begun
		t.tx, t.begun = tx, true
		if t.claim != nil && !wasBegun {
			// The transaction is aborted when the claim fails: every
			// statement on tx then fails too.
			if _, err := tx.Exec(t.ctx, queries.Get("ClaimScope"), t.claim...); err != nil {
				_ = t.claimFailed(err)
			}
		}
	}
	return t.tx
}

// batchRow is the row of a statement sent in a batch behind BEGIN: Scan
// reads it and closes the batch, as pgx.Row.Scan releases its query.
type batchRow struct{ results pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := r.results.QueryRow().Scan(dest...)
	if cerr := r.results.Close(); err == nil && !errors.Is(cerr, pgx.ErrNoRows) {
		err = cerr
	}
	return err
}

// batchRows are the rows of a query sent in a batch behind BEGIN. The
// batch is closed, so that the connection takes the next statement, as
// soon as the rows end: when Next returns false or at Close.
type batchRows struct {
	pgx.Rows
	results pgx.BatchResults
	done    bool  // the batch is closed
	err     error // closing the batch failed
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Err() error { return cmp.Or(r.Rows.Err(), r.err) }

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.done {
		return
	}
	r.done = true
	r.err = r.results.Close()
}

// errRow is a row whose Scan fails.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// runLazy runs fn on a lazyTx (with claim, ClaimScope's arguments, in
// front of fn's first statement; nil for none) and then sends the statement that records
// fn's outcome (built by final) and COMMIT in one pipelined batch, with
// BEGIN in front when fn ran no statement (the connection is taken then).
// It returns the statement's row, the statement's own error (stmtErr: the
// transaction was aborted, so the COMMIT rolled back) and any other
// error: a connection that could not be had or a failed BEGIN (before
// fn's own error, which may only be fn's reaction to it); fn's,
// unchanged; final's; the business function having ended the
// transaction; a COMMIT that failed or did not commit. Its own errors name
// op ("idempg: op: …"). Whatever is still open is rolled back before the
// connection goes back to the pool. ctx governs the transaction, fn
// included, up to the batch with the COMMIT, which is waited for whatever
// ctx does (commit.go).
func (s *Store) runLazy(ctx context.Context, op string, rec registry.Record, claim []any, fn registry.BusinessFunc,
	final func(out registry.Outcome) (string, []any, error)) (done registry.Record, stmtErr, err error) {
	tx := &lazyTx{ctx: ctx, pool: s.pool, sqlDB: s.sqlDB, claim: claim}
	defer tx.release(ctx)
	out, err := fn(ctx, tx, rec)
	if tx.lost != nil {
		// Another transaction recorded the scope while this one waited
		// for its claim: no statement of fn ran.
		return registry.Record{}, tx.lost, nil
	}
	if tx.err != nil {
		// The transaction could not begin (no connection, or BEGIN
		// failed): storage trouble, whatever fn made of it.
		return registry.Record{}, nil, tx.err
	}
	if err != nil {
		return registry.Record{}, nil, err
	}
	query, args, err := final(out)
	if err != nil {
		return registry.Record{}, nil, err
	}
	if err := tx.acquire(ctx); err != nil {
		return registry.Record{}, nil, err
	}
	conn := tx.conn
	batch := &pgx.Batch{}
	switch {
	case !tx.begun: // fn ran no statement
		batch.Queue("begin")
	case conn.PgConn().TxStatus() == 'I':
		return registry.Record{}, nil, fmt.Errorf("idempg: %s: the business function ended the transaction", op)
	}
	// In its default mode (cache_statement) pgx describes a statement it
	// has not prepared on this connection before it sends the batch — and
	// parsing an INSERT or UPDATE takes its table locks. Prepare it here,
	// under ctx, so that that wait still ends with ctx (a map lookup once
	// prepared). A statement prepared so outlives a change of the tables
	// it reads (a migration by a newer version): the one call that finds
	// it stale deallocates it, as pgx's own cache does, and the next
	// prepares it anew. (The other modes prepare nothing by name; their
	// describe, in cache_describe and describe_exec, is bounded only by a
	// pooler's or the server's own limits.)
	if s.prepares {
		if _, err := conn.Prepare(ctx, query, query); err != nil {
			return registry.Record{}, nil, fmt.Errorf("idempg: %s: prepare: %w", op, translate(err))
		}
		defer func() {
			if staleStatement(cmp.Or(stmtErr, err)) {
				_ = conn.Deallocate(commitCtx(ctx), query) // a broken connection is dropped anyway
			}
		}()
	}
	// The batch runs under commitCtx: its COMMIT is waited for whatever
	// ctx does (commit.go). Its statement may wait for a lock, though
	// (another transaction holding the record or a business table's
	// rows), and that wait must still end with ctx's deadline: the
	// server ends it (lock_timeout, transaction-local, which a COMMIT
	// never waits on) instead of a cancel request, which could reach the
	// COMMIT.
	lockBound := false
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			return registry.Record{}, nil, fmt.Errorf("idempg: %s: %w", op, translate(context.DeadlineExceeded))
		}
		batch.Queue("SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(max(left.Milliseconds(), 1), 10)+"ms")
		lockBound = true
	}
	batch.Queue(query, args...)
	batch.Queue("commit")
	results := conn.SendBatch(commitCtx(ctx), batch)
	var beginErr error
	if !tx.begun {
		_, beginErr = results.Exec()
	}
	var boundErr error
	if lockBound {
		_, boundErr = results.Exec()
	}
	done, stmtErr = s.scanRecord(results.QueryRow())
	tag, commitErr := results.Exec()
	closeErr := results.Close()
	switch {
	case beginErr != nil:
		return registry.Record{}, nil, fmt.Errorf("idempg: %s: begin: %w", op, translate(beginErr))
	case boundErr != nil:
		return registry.Record{}, nil, fmt.Errorf("idempg: %s: lock_timeout: %w", op, translate(boundErr))
	case stmtErr != nil:
		// A database error aborted the transaction, so the COMMIT rolled
		// back. (An error of reading the returned row on this side, which
		// the COMMIT did not wait for, is reported the same way; the
		// caller's re-read tells whether the outcome is there.)
		return registry.Record{}, stmtErr, nil
	case commitErr != nil || closeErr != nil:
		return registry.Record{}, nil, fmt.Errorf("idempg: %s: commit: %w", op, translate(cmp.Or(commitErr, closeErr)))
	case tag.String() != "COMMIT":
		return registry.Record{}, nil, fmt.Errorf("idempg: %s: commit: %w", op, pgx.ErrTxCommitRollback)
	}
	return done, nil, nil
}
