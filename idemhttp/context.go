package idemhttp

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// execution is what the middleware hands a handler through the request
// context while it runs: the business transaction, the operation, the
// canonical payload and the outbox messages it collects.
type execution struct {
	tx      registry.Tx
	rec     registry.Record
	caller  idem.Identity
	payload []byte
	wt      writeTracker // tx, when the middleware tracks the handler's writes (business)
	mu      sync.Mutex
	outbox  []registry.Message
	// plain: no record is kept (off, or a shadow execution without a
	// record), so nothing writes queued outbox messages (AddOutbox).
	plain bool
}

type ctxKey struct{}

func withExecution(ctx context.Context, e *execution) context.Context {
	return context.WithValue(ctx, ctxKey{}, e)
}

func executionFrom(ctx context.Context) *execution {
	e, _ := ctx.Value(ctxKey{}).(*execution)
	return e
}

// Tx returns the business transaction of the request, or nil outside the
// middleware. Writes made through it commit atomically with the outcome
// the middleware records (or, in shadow and off modes, with nothing
// else); they roll back if the handler's response is not stored.
func Tx(ctx context.Context) registry.Tx {
	if e := executionFrom(ctx); e != nil {
		return e.tx
	}
	return nil
}

// SQLTx returns the request's business transaction as a *sql.Tx, for
// handlers written on database/sql (plain *sql.Tx, GORM, sqlx, sqlc):
// what they write through it commits together with the outcome the
// middleware records, or not at all, on every engine and in every
// execution style (two-phase, OneTransaction, and shadow and off modes'
// plain transaction). The middleware ends it: the handler must not call
// its Commit (refused with registry.ErrTxOwned) or Rollback; after
// either, nothing is recorded. On PostgreSQL it is the record's own server
// transaction, through pgx's stdlib driver, and must be asked for before
// the handler's first statement through Tx; statements use the
// database's placeholders ($1 … on PostgreSQL and SQLite, ? on
// MySQL/MariaDB). Outside the middleware, or when the store cannot give
// one, the error wraps registry.ErrNoSQLTx. registry.SQLTx says the
// rest. Asking twice returns the same *sql.Tx.
func SQLTx(ctx context.Context) (*sql.Tx, error) {
	tx := Tx(ctx)
	if tx == nil {
		return nil, fmt.Errorf("idemhttp: %w: not inside the middleware", registry.ErrNoSQLTx)
	}
	return registry.SQLTx(tx)
}

// Caller returns the identity the middleware authenticated the request
// as (Middleware.Identity), and false outside an execution, so a handler
// need not authenticate the request a second time. A request executed
// plainly (shadow, off) although Identity failed has no caller: false.
func Caller(ctx context.Context) (idem.Identity, bool) {
	if e := executionFrom(ctx); e != nil && e.caller != (idem.Identity{}) {
		return e.caller, true
	}
	return idem.Identity{}, false
}

// OperationID returns the server-generated operation ID of the request,
// or "" outside the middleware. A request executed without a record (off
// mode, and shadow's plain executions) gets a fresh operation ID that no
// record holds.
// Handlers may use it to derive resource IDs; the client's key is never
// available to them.
func OperationID(ctx context.Context) string {
	if e := executionFrom(ctx); e != nil {
		return e.rec.OperationID
	}
	return ""
}

// Payload returns the canonical payload the fingerprint was computed from
// (for the schema mode: members sorted, decimals at their scale), or nil
// outside the middleware. Handlers should parse this instead of the raw
// body: it is exactly what was checked. The slice must not be modified.
func Payload(ctx context.Context) []byte {
	if e := executionFrom(ctx); e != nil {
		return e.payload
	}
	return nil
}

// AddOutbox queues an outbox message to be written in the business
// transaction together with the outcome, with a stable ID derived from
// the operation (registry.MessageID). Messages of a response that is not
// stored are dropped with the transaction. It returns false, queuing
// nothing, outside the middleware and in a plain execution (PlainExecution):
// there no outcome is recorded, so nothing would write the message — the
// handler writes it in Tx itself, as a server without idempotency does.
// Safe for concurrent use.
func AddOutbox(ctx context.Context, m registry.Message) bool {
	e := executionFrom(ctx)
	if e == nil || e.plain {
		return false
	}
	e.mu.Lock()
	e.outbox = append(e.outbox, m)
	e.mu.Unlock()
	e.wt.wrote.Store(true) // the message commits with the outcome: a change
	return true
}

// PlainExecution reports whether ctx is a plain execution of the
// middleware: the operation is off, or a shadow request runs without a
// record (docs/contract.md §11). Tx is then a plain business transaction,
// OperationID a fresh ID no record holds, and AddOutbox refuses: a handler
// that publishes through the outbox writes its message in Tx itself.
func PlainExecution(ctx context.Context) bool {
	e := executionFrom(ctx)
	return e != nil && e.plain
}

// writeTracker is the business transaction as handed to a handler: it
// notes whether the handler may have changed anything, so that a declared
// refusal that changed nothing is stored as REJECTED rather than
// FAILED_FINAL. In doubt it counts a change: an Exec that affected a row,
// a Query or QueryRow that is not a plain SELECT (INSERT … RETURNING, a
// data-modifying WITH), any use of Native, and an outbox message
// (AddOutbox) all do. Its one blind spot is a SELECT that calls a
// function which writes.
//
// It also keeps the first error a statement of the handler got (Exec,
// Query, or a QueryRow's Scan other than "no rows"): on PostgreSQL such a
// statement aborts the transaction, so the outcome cannot commit with it,
// and that failure is the handler's, not storage trouble (answer). Through
// Native it sees nothing. Safe for concurrent use as far as the wrapped
// transaction is.
type writeTracker struct {
	registry.Tx
	wrote  atomic.Bool
	failed atomic.Pointer[error] // the first statement error, nil if none
}

// failure returns the first error a statement of the handler got, or nil.
func (w *writeTracker) failure() error {
	if p := w.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *writeTracker) fail(err error) {
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		w.failed.CompareAndSwap(nil, &err)
	}
}

func (w *writeTracker) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	n, err := w.Tx.Exec(ctx, sql, args...)
	if n > 0 {
		w.wrote.Store(true)
	}
	w.fail(err)
	return n, err
}

func (w *writeTracker) QueryRow(ctx context.Context, sql string, args ...any) registry.Row {
	w.noteQuery(sql)
	return trackedRow{w.Tx.QueryRow(ctx, sql, args...), w}
}

func (w *writeTracker) Query(ctx context.Context, sql string, args ...any) (registry.Rows, error) {
	w.noteQuery(sql)
	rows, err := w.Tx.Query(ctx, sql, args...)
	w.fail(err)
	return rows, err
}

// trackedRow is a row whose Scan error, unless "no rows" (both drivers'
// errors for it match sql.ErrNoRows), is noted as a failed statement.
type trackedRow struct {
	registry.Row
	w *writeTracker
}

func (r trackedRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	r.w.fail(err)
	return err
}

func (w *writeTracker) Native() any {
	w.wrote.Store(true)
	return w.Tx.Native()
}

// SQLTx counts as a change, as Native does, and passes the call on
// (registry.SQLTx).
func (w *writeTracker) SQLTx() (*sql.Tx, error) {
	w.wrote.Store(true)
	return registry.SQLTx(w.Tx)
}

// noteQuery counts a query as a change unless it is a plain SELECT.
func (w *writeTracker) noteQuery(sql string) {
	if !isSelect(sql) {
		w.wrote.Store(true)
	}
}

// isSelect reports whether sql's first keyword, after white space and
// SQL comments, is SELECT.
func isSelect(sql string) bool {
	for {
		sql = strings.TrimLeft(sql, " \t\r\n")
		switch {
		case strings.HasPrefix(sql, "--"):
			i := strings.IndexByte(sql, '\n')
			if i < 0 {
				return false
			}
			sql = sql[i+1:]
		case strings.HasPrefix(sql, "/*"):
			i := strings.Index(sql, "*/")
			if i < 0 {
				return false
			}
			sql = sql[i+2:]
		default:
			const kw = "SELECT"
			if len(sql) < len(kw) || !strings.EqualFold(sql[:len(kw)], kw) {
				return false
			}
			rest := sql[len(kw):]
			return rest == "" || !isWordByte(rest[0])
		}
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
