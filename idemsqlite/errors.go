package idemsqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/registry"
)

// SQLite result codes (https://sqlite.org/rescode.html), part of SQLite's
// stable C API. They equal the constants of modernc.org/sqlite/lib
// (errors_test.go checks it); they are repeated here so that only open.go
// imports the SQLite library.
const (
	codeBusy                 = 5    // SQLITE_BUSY
	codeLocked               = 6    // SQLITE_LOCKED
	codeCantOpen             = 14   // SQLITE_CANTOPEN
	codeConstraintPrimaryKey = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	codeConstraintUnique     = 2067 // SQLITE_CONSTRAINT_UNIQUE
	codeConstraintTrigger    = 1811 // SQLITE_CONSTRAINT_TRIGGER: a trigger's RAISE(ABORT, …)
)

// tenantMovedMessage starts the message of the tenant fence's RAISE
// (migration 015).
const tenantMovedMessage = "idem: tenant moved"

// isTenantMoved reports whether err is the tenant fence's refusal: a
// trigger's RAISE(ABORT) whose message is migration 015's.
func isTenantMoved(err error) bool {
	return sqliteCode(err) == codeConstraintTrigger && strings.Contains(err.Error(), tenantMovedMessage)
}

// coder is what the error type of modernc.org/sqlite (*sqlite.Error)
// offers: the extended result code of the failed call (the library turns
// extended result codes on for every connection).
type coder interface {
	error
	Code() int
}

// sqliteCode returns the extended SQLite result code carried by err, or 0.
func sqliteCode(err error) int {
	if c, ok := errors.AsType[coder](err); ok {
		return c.Code()
	}
	return 0
}

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY
// constraint failure. Only Reserve uses it, to retry an operation ID that
// collided; no caller ever reports it as a key conflict.
func isUniqueViolation(err error) bool {
	code := sqliteCode(err)
	return code == codeConstraintUnique || code == codeConstraintPrimaryKey
}

// translate maps a database error to the registry's errors at the driver
// boundary:
//
//   - sql.ErrNoRows → registry.ErrNotFound;
//   - the tenant fence's RAISE (migration 015) → registry.ErrTenantMoved,
//     the cause kept;
//   - SQLITE_BUSY and SQLITE_LOCKED (the write lock was not obtained within
//     the busy timeout), SQLITE_CANTOPEN, a bad or finished connection and
//     a context deadline → wrapped in registry.ErrUnavailable, the cause
//     kept (errors.Is finds both);
//   - everything else, constraint failures included, unchanged: a storage
//     failure, never a key conflict.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return registry.ErrNotFound
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrFenced),
		errors.Is(err, registry.ErrUnavailable), errors.Is(err, registry.ErrActiveLimit),
		errors.Is(err, registry.ErrTenantMoved):
		return err
	case isTenantMoved(err):
		return fmt.Errorf("%w: %w", registry.ErrTenantMoved, err)
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	switch sqliteCode(err) & 0xff { // primary result code
	case codeBusy, codeLocked, codeCantOpen:
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return err
}

// fail returns the error of a failed call: translated and prefixed with
// the driver and the operation. When the Store was closed meanwhile
// (database/sql then reports "sql: database is closed", which has no
// sentinel), the error is wrapped in registry.ErrUnavailable.
func (s *Store) fail(op string, err error) error {
	err = translate(err)
	if s.closed.Load() && !errors.Is(err, registry.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return fmt.Errorf("idemsqlite: %s: %w", op, err)
}
