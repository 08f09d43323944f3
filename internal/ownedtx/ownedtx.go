// Package ownedtx keeps the database/sql drivers' transactions the
// Store's to commit (idemsqlite, idemmysql). A transaction a Store hands
// to business code (Complete, ExecuteOnce, InTx) reaches it as a *sql.Tx
// through registry.SQLTx, and a Commit there would commit the business
// rows — and, in the one-transaction style, the claim — without the
// outcome. Such a transaction is begun with a context from Context: the
// driver connection's BeginTx wraps its driver.Tx with Guard, whose
// Commit refuses (registry.ErrTxOwned) and rolls back until the Store,
// about to commit, calls Commit here. The Store's own later statements
// then fail (sql.ErrTxDone), so nothing is recorded. Safe for concurrent
// use.
package ownedtx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/idemkit/idem/registry"
)

// key is the context key of a *Permit.
type key struct{}

// Permit is the Store's permission to commit one transaction.
type Permit struct{ commit atomic.Bool }

// Context returns ctx marked so that the transaction begun with it is the
// Store's to commit, and the permission to give before committing.
func Context(ctx context.Context) (context.Context, *Permit) {
	p := &Permit{}
	return context.WithValue(ctx, key{}, p), p
}

// Commit commits tx, begun with p's context, as the Store.
func Commit(tx *sql.Tx, p *Permit) error {
	p.commit.Store(true)
	return tx.Commit()
}

// Guard wraps tx when ctx says the Store owns it; call it from the
// driver connection's BeginTx.
func Guard(ctx context.Context, tx driver.Tx) driver.Tx {
	if p, ok := ctx.Value(key{}).(*Permit); ok {
		return &guarded{Tx: tx, p: p}
	}
	return tx
}

// guarded is a driver.Tx the Store handed to business code.
type guarded struct {
	driver.Tx
	p *Permit
}

// Commit commits only with the Store's permission; otherwise it rolls
// back and returns an error wrapping registry.ErrTxOwned — and
// driver.ErrBadConn when the rollback failed, so that database/sql
// discards the connection instead of pooling one whose transaction may
// still be open.
func (t *guarded) Commit() error {
	if t.p.commit.Load() {
		return t.Tx.Commit()
	}
	refused := fmt.Errorf("ownedtx: %w", registry.ErrTxOwned)
	if err := t.Tx.Rollback(); err != nil {
		return errors.Join(refused, fmt.Errorf("ownedtx: rolling back: %w", err), driver.ErrBadConn)
	}
	return refused
}
