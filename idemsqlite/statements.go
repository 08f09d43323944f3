package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// prepared names the queries of queries.sql that a Store prepares once.
// Preparing a statement is most of its cost on SQLite (the triggers of
// idem_operations are compiled into every statement that writes it), and
// database/sql keeps a prepared statement per connection and reuses it,
// inside transactions too (Tx.StmtContext).
var prepared = []string{
	"ReserveInsert", "ReserveInsertLimited", "ClaimInsert", "ClaimInsertLimited", "GetByScope", "GetByID", "CompleteOperation",
	"InsertOutbox", "Release", "TakeOver", "ClaimOutbox", "MarkPublished",
}

// prepare prepares the statements of prepared on s.db.
func (s *Store) prepare(ctx context.Context) error {
	s.stmts = make(map[string]*sql.Stmt, len(prepared))
	for _, name := range prepared {
		st, err := s.db.PrepareContext(ctx, queries.Get(name))
		if err != nil {
			s.closeStmts()
			return fmt.Errorf("idemsqlite: prepare %s: %w", name, translate(err))
		}
		s.stmts[name] = st
	}
	return nil
}

// closeStmts closes the prepared statements.
func (s *Store) closeStmts() error {
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// stmt returns the prepared statement of a query.
func (s *Store) stmt(name string) *sql.Stmt {
	st, ok := s.stmts[name]
	if !ok {
		panic("idemsqlite: query not prepared: " + name)
	}
	return st
}

// txStmt returns the prepared statement of a query for use in tx, which
// must belong to s.db.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, name string) *sql.Stmt {
	return tx.StmtContext(ctx, s.stmt(name))
}
