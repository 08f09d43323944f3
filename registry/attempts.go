package registry

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
)

// Recovery attempts: what the recovery worker last tried for an UNKNOWN
// operation it could not settle yet — how many attempts failed, the last
// one's error and when it will try next — so that the console can say
// why an operation is UNKNOWN and what happens next. Display only:
// nothing is ever settled from it (evidence is the recorded lookups,
// LookupLog). The table is every driver's (idem_recovery_attempts), the
// statements portable SQL in attempts.sql run through Store.InTx.

//go:embed attempts.sql
var attemptFiles embed.FS

var attemptQueries = sqlfile.MustLoad(attemptFiles, "attempts.sql")

// RecoveryAttempt is the recovery worker's record of an UNKNOWN operation
// it could not settle yet.
type RecoveryAttempt struct {
	OperationID string
	// Attempts counts the failed attempts recorded, from 1.
	Attempts int64
	// LastError says why the last attempt did not settle the operation
	// ("GET … connection refused"), cut to MaxAuditDetail bytes.
	LastError string
	// At is when the last attempt failed; NextAt when the worker will
	// try again (by the worker's clock, to the millisecond).
	At, NextAt time.Time
}

// RecordRecoveryAttempt records a failed attempt to settle operation id:
// its error (cut to MaxAuditDetail bytes, invalid UTF-8 and NUL
// replaced), when it failed and when the next attempt is due. Each
// attempt raises the operation's count in one atomic statement (the
// database serialises concurrent workers on the row, so no attempt is
// lost); the first inserts the row, and when two first attempts race,
// the one whose insert fails on the primary key is recorded again as
// the next. It returns the row as written. ctx governs the statements; s
// must be a driver's Store (the table is its migrations').
func RecordRecoveryAttempt(ctx context.Context, s Store, id, lastErr string, at, next time.Time) (RecoveryAttempt, error) {
	if id == "" {
		return RecoveryAttempt{}, errors.New("registry: a recovery attempt needs an operation ID")
	}
	a := RecoveryAttempt{OperationID: id, LastError: clipText(lastErr, MaxAuditDetail),
		At: time.UnixMilli(at.UnixMilli()), NextAt: time.UnixMilli(next.UnixMilli())}
	var err error
	for range 3 { // a lost race to insert the first row costs one more round
		err = s.InTx(ctx, func(ctx context.Context, tx Tx) error {
			n, err := tx.Exec(ctx, attemptQueries.Get("attempt_next"), id, a.LastError, a.At.UnixMilli(), a.NextAt.UnixMilli())
			switch {
			case err != nil:
				return err
			case n == 0:
				a.Attempts = 1
				_, err = tx.Exec(ctx, attemptQueries.Get("attempt_insert"), id, a.LastError, a.At.UnixMilli(), a.NextAt.UnixMilli())
				return err
			}
			cur, err := readAttempt(ctx, tx, id) // this transaction's own write
			a.Attempts = cur.Attempts
			return err
		})
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return RecoveryAttempt{}, fmt.Errorf("registry: record the recovery attempt of %s: %w", id, err)
	}
	return a, nil
}

// LastRecoveryAttempt returns the recorded attempts of operation id;
// ErrNotFound when none is recorded. ctx governs the query.
func LastRecoveryAttempt(ctx context.Context, s Store, id string) (RecoveryAttempt, error) {
	var a RecoveryAttempt
	err := s.InTx(ctx, func(ctx context.Context, tx Tx) (err error) {
		a, err = readAttempt(ctx, tx, id)
		return err
	})
	switch {
	case err != nil:
		return RecoveryAttempt{}, fmt.Errorf("registry: read the recovery attempts of %s: %w", id, err)
	case a.Attempts == 0:
		return RecoveryAttempt{}, ErrNotFound
	}
	return a, nil
}

// ForgetRecoveryAttempts deletes the recorded attempts of operation id
// (the worker settled it, or it is no longer UNKNOWN); none is not an
// error. ctx governs the statement.
func ForgetRecoveryAttempts(ctx context.Context, s Store, id string) error {
	err := s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		_, err := tx.Exec(ctx, attemptQueries.Get("attempt_forget"), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("registry: forget the recovery attempts of %s: %w", id, err)
	}
	return nil
}

// readAttempt reads the attempts row of id in tx; Attempts 0 if none.
func readAttempt(ctx context.Context, tx Tx, id string) (RecoveryAttempt, error) {
	var n, at, next int64
	a := RecoveryAttempt{OperationID: id}
	if err := tx.QueryRow(ctx, attemptQueries.Get("attempt_get"), id).Scan(&n, &a.Attempts, &a.LastError, &at, &next); err != nil {
		return RecoveryAttempt{}, err
	}
	if n == 0 {
		return RecoveryAttempt{OperationID: id}, nil
	}
	a.At, a.NextAt = time.UnixMilli(at), time.UnixMilli(next)
	return a, nil
}
