package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemkit/idem/registry"
)

// ExtendLease moves the lease of rec's record to now + lease if the record
// is still in flight at rec.OwnerGen; see registry.LeaseScanner. Like every
// write on SQLite it waits for the single write lock, so a heartbeat for an
// execution whose handler holds that lock lands only after it commits (and
// is then fenced, harmlessly).
func (s *Store) ExtendLease(ctx context.Context, rec registry.Record, lease time.Duration) (time.Time, error) {
	if err := s.checkOpen(); err != nil {
		return time.Time{}, err
	}
	if lease <= 0 {
		lease = registry.DefaultLease
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return time.Time{}, s.fail("extend lease", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var until int64
	err = tx.QueryRowContext(ctx, recoveryQueries.Get("ExtendLease"),
		s.nowParam(), rec.Scope[:], rec.OperationID, rec.OwnerGen, lease.Microseconds()).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, s.fail("extend lease", registry.ErrFenced)
	}
	if err != nil {
		return time.Time{}, s.fail("extend lease", err)
	}
	if err := tx.Commit(); err != nil {
		return time.Time{}, s.fail("extend lease", err)
	}
	return fromMicros(until), nil
}
