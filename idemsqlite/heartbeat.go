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
	lease = registry.LeaseOrDefault(lease)
	var until int64
	err := s.writeTx(ctx, "extend lease", func(tx *sql.Tx, now any) error {
		err := tx.QueryRowContext(ctx, recoveryQueries.Get("ExtendLease"),
			now, rec.Scope[:], rec.OperationID, rec.OwnerGen, lease.Microseconds()).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			return registry.ErrFenced
		}
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return fromMicros(until), nil
}
