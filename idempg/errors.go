package idempg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/idemkit/idem/registry"
)

// SQLSTATE codes the driver branches on.
const (
	codeQueryCanceled        = "57014" // statement_timeout or a cancel request
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeLockNotAvailable     = "55P03" // lock_timeout
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	codeTooManyConnections   = "53300"
	classConnectionException = "08"
	codeCachedPlanChanged    = "0A000" // feature_not_supported: "cached plan must not change result type"
	codeNoSuchStatement      = "26000" // invalid_sql_statement_name
	codeFenced               = "IDM01" // idem_fenced (migration 006): Finish matched no record
	codeClaimed              = "IDM02" // idem_claim (migration 011): the scope has a record
	codeTenantMoved          = "IDM03" // idem_tenant_moved (migration 020): the tenant is fenced
)

// isFenced reports whether err is the Finish statement's refusal of a
// fenced completion (SQLSTATE IDM01).
func isFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeFenced
}

// isClaimed reports whether err is idem_claim's refusal: the scope has a
// record (SQLSTATE IDM02).
func isClaimed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeClaimed
}

// isTenantMoved reports whether err is the tenant fence's refusal
// (SQLSTATE IDM03).
func isTenantMoved(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeTenantMoved
}

// translate turns a pgx or PostgreSQL error into the registry's errors; it
// is the one place where database errors cross the driver boundary:
//
//   - pgx.ErrNoRows → registry.ErrNotFound;
//   - SQLSTATE IDM03, the tenant fence's refusal (migration 020) →
//     registry.ErrTenantMoved wrapping err;
//   - errors that mean the database could not be reached or did not answer
//     in time (see unavailable) → registry.ErrUnavailable wrapping err;
//   - registry errors pass unchanged; everything else is returned as is,
//     still inspectable with errors.As(*pgconn.PgError). A unique violation
//     in particular stays a plain database error: it is never reported as a
//     key conflict.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrFenced),
		errors.Is(err, registry.ErrUnavailable), errors.Is(err, registry.ErrActiveLimit),
		errors.Is(err, registry.ErrTenantMoved):
		return err
	case errors.Is(err, pgx.ErrNoRows):
		return registry.ErrNotFound
	case isTenantMoved(err):
		return fmt.Errorf("%w: %w", registry.ErrTenantMoved, err)
	case unavailable(err):
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return err
}

// unavailable reports whether err means the database could not be reached,
// lost the connection or did not answer in time — cases where the caller
// cannot know more and may retry later — or that the Store was closed.
// Serialization failures and deadlocks count too: the statement was rolled
// back and a retry may pass. A caller's own cancellation (context.Canceled)
// does not.
func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeQueryCanceled, codeSerializationFailure, codeDeadlockDetected,
			codeLockNotAvailable, codeAdminShutdown, codeCrashShutdown,
			codeCannotConnectNow, codeTooManyConnections:
			return true
		}
		return strings.HasPrefix(pgErr.Code, classConnectionException)
	}
	if errors.Is(err, context.Canceled) && !pgconn.Timeout(err) {
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err),
		pgconn.SafeToRetry(err), errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, net.ErrClosed),
		errors.Is(err, puddle.ErrClosedPool), errors.Is(err, sql.ErrConnDone), // the Store was closed
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}

// staleStatement reports whether err says a prepared statement no longer
// fits the tables it reads (their columns changed since it was prepared)
// or is gone: it must be prepared again.
func staleStatement(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == codeCachedPlanChanged || pgErr.Code == codeNoSuchStatement)
}
