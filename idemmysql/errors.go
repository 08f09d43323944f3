package idemmysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/registry"
)

// Server error numbers the driver branches on (MySQL and MariaDB share
// them).
const (
	errDupEntry          = 1062 // ER_DUP_ENTRY
	errLockWaitTimeout   = 1205 // ER_LOCK_WAIT_TIMEOUT
	errLockDeadlock      = 1213 // ER_LOCK_DEADLOCK
	errConCount          = 1040 // ER_CON_COUNT_ERROR: too many connections
	errServerShutdown    = 1053 // ER_SERVER_SHUTDOWN
	errQueryInterrupted  = 1317 // ER_QUERY_INTERRUPTED (KILL QUERY, shutdown)
	errConnectionKilled  = 1927 // ER_CONNECTION_KILLED (MariaDB)
	errStatementTimeout  = 1969 // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
	errQueryTimeoutMySQL = 3024 // ER_QUERY_TIMEOUT (MySQL max_execution_time)
	errReadOnly          = 1290 // ER_OPTION_PREVENTS_STATEMENT (read_only: a demoted primary)
	errReadOnlyTx        = 1792 // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
)

// sqlStateTenantMoved is the SQLSTATE the tenant fence's triggers signal
// (migration 006): the operation's tenant is fenced.
const sqlStateTenantMoved = "IDM03"

// isTenantMoved reports whether err is the tenant fence's refusal.
func isTenantMoved(err error) bool {
	e, ok := errors.AsType[*mysql.MySQLError](err)
	return ok && string(e.SQLState[:]) == sqlStateTenantMoved
}

// serverCode returns the server error number carried by err, or 0.
func serverCode(err error) uint16 {
	if e, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return e.Number
	}
	return 0
}

// duplicateKey returns the name of the unique key a duplicate-entry error
// names ("PRIMARY", "operation_id", …), or "" when err is not one.
func duplicateKey(err error) (string, bool) {
	e, ok := errors.AsType[*mysql.MySQLError](err)
	if !ok || e.Number != errDupEntry {
		return "", false
	}
	// "Duplicate entry '…' for key 'name'" (MySQL 8 qualifies it as
	// 'table.name').
	msg := e.Message
	i := strings.LastIndex(msg, "for key '")
	if i < 0 {
		return "", true
	}
	key := strings.TrimSuffix(msg[i+len("for key '"):], "'")
	if j := strings.LastIndex(key, "."); j >= 0 {
		key = key[j+1:]
	}
	return key, true
}

// isDeadlock reports whether err is InnoDB's deadlock error: the
// server rolled the whole transaction back, and the caller may run it
// again when nothing outside the database happened in it.
func isDeadlock(err error) bool { return serverCode(err) == errLockDeadlock }

// translate maps a database error to the registry's errors at the driver
// boundary:
//
//   - sql.ErrNoRows → registry.ErrNotFound;
//   - the tenant fence's refusal (SQLSTATE IDM03, migration 006) →
//     registry.ErrTenantMoved wrapping err;
//   - a lost or refused connection (mysql.ErrInvalidConn, a bad or
//     finished connection, a network error, too many connections, a
//     server shutting down, a killed connection or query), a lock wait
//     timeout (1205), a deadlock (1213) that was not retried, a statement
//     timeout, a read-only server (a demoted primary) and a context
//     deadline → wrapped in registry.ErrUnavailable, the cause kept;
//   - everything else, constraint and trigger failures included,
//     unchanged: a storage failure, never a key conflict.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return registry.ErrNotFound
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrFenced),
		errors.Is(err, registry.ErrUnavailable), errors.Is(err, registry.ErrActiveLimit),
		errors.Is(err, registry.ErrWriterFenced), errors.Is(err, registry.ErrTenantMoved):
		return err
	case isTenantMoved(err):
		return fmt.Errorf("%w: %w", registry.ErrTenantMoved, err)
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	switch serverCode(err) {
	case errLockWaitTimeout, errLockDeadlock, errConCount, errServerShutdown, errQueryInterrupted,
		errConnectionKilled, errStatementTimeout, errQueryTimeoutMySQL, errReadOnly, errReadOnlyTx:
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return err
}

// fail returns the error of a failed call: translated and prefixed with
// the driver and the operation. When the Store was closed meanwhile
// ("sql: database is closed" has no sentinel), the error is wrapped in
// registry.ErrUnavailable.
func (s *Store) fail(op string, err error) error {
	err = translate(err)
	if s.closed.Load() && !errors.Is(err, registry.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return fmt.Errorf("idemmysql: %s: %w", op, err)
}
