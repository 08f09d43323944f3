package idemhttp

import (
	"context"
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

// Caller returns the identity the middleware authenticated the request
// as (Middleware.Identity), and false outside an execution, so a handler
// need not authenticate the request a second time.
func Caller(ctx context.Context) (idem.Identity, bool) {
	if e := executionFrom(ctx); e != nil && e.caller != (idem.Identity{}) {
		return e.caller, true
	}
	return idem.Identity{}, false
}

// OperationID returns the server-generated operation ID of the request,
// or "" when there is none (outside the middleware, or in off mode).
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
// stored are dropped with the transaction. It returns false outside the
// middleware. Safe for concurrent use.
func AddOutbox(ctx context.Context, m registry.Message) bool {
	e := executionFrom(ctx)
	if e == nil {
		return false
	}
	e.mu.Lock()
	e.outbox = append(e.outbox, m)
	e.mu.Unlock()
	return true
}

// writeTracker is the business transaction as handed to a handler: it
// notes whether the handler may have changed anything — an Exec that
// affected a row, or any use of Native — so that a declared refusal that
// changed nothing is stored as REJECTED rather than FAILED_FINAL. QueryRow
// and Query count as reads: writes made through them (INSERT … RETURNING)
// are not noticed, so a refusal after one is labelled REJECTED although
// its writes commit. Safe for
// concurrent use as far as the wrapped transaction is.
type writeTracker struct {
	registry.Tx
	wrote atomic.Bool
}

func (w *writeTracker) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	n, err := w.Tx.Exec(ctx, sql, args...)
	if n > 0 {
		w.wrote.Store(true)
	}
	return n, err
}

func (w *writeTracker) Native() any {
	w.wrote.Store(true)
	return w.Tx.Native()
}
